// E2B's official JavaScript SDK (npm e2b) against nsys-cortex serve --e2b
// in kube mode: the calls of a typical agent program, each checked. Run by
// TestE2B with E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL set and the
// SDK on NODE_PATH. A failure prints the SDK's own error and exits 1.
const { Sandbox, CommandExitError } = require('e2b')

let failed = 0
async function step(name, f, check) {
  try {
    const got = await f()
    if (check && !check(got)) {
      failed++
      console.log(`FAIL ${name}: got ${JSON.stringify(got)}`)
      return got
    }
    console.log(`ok   ${name}`)
    return got
  } catch (e) {
    failed++
    console.log(`FAIL ${name}: ${e.constructor.name}: ${e.message}`)
  }
}

async function main() {
  const label = `kube${process.pid}`
  const s = await step('create with metadata and envs', () => Sandbox.create({ metadata: { suite: label }, envs: { GREETING: 'hello' }, timeoutMs: 120000 }), (x) => !!x.sandboxId)
  if (!s) process.exit(1)

  let streamed = ''
  await step('run with streaming callbacks', () => s.commands.run('echo $GREETING; for i in 1 2 3; do echo $i; done; echo oops >&2', { onStdout: (d) => { streamed += d } }),
    (r) => r.exitCode === 0 && r.stdout === 'hello\n1\n2\n3\n' && r.stderr === 'oops\n' && streamed === r.stdout)
  await step('a non-zero exit is CommandExitError', async () => {
    try { await s.commands.run('exit 3') } catch (e) { return [e instanceof CommandExitError, e.exitCode] }
  }, (x) => x && x[0] === true && x[1] === 3)

  let echoed = ''
  const wc = await step('a command reading stdin', () => s.commands.run('wc -c', { background: true, stdin: true, onStdout: (d) => { echoed += d } }), (h) => h.pid > 0)
  await step('send stdin, close stdin', async () => { await s.commands.sendStdin(wc.pid, '12345'); await s.commands.closeStdin(wc.pid); return (await wc.wait()).stdout.trim() }, (x) => x === '5')

  const bg = await step('background command', () => s.commands.run('sleep 60', { background: true }), (h) => h.pid > 0)
  await step('list commands', () => s.commands.list(), (ps) => ps.some((p) => p.pid === bg.pid))
  const again = await step('connect to the background command', () => s.commands.connect(bg.pid), (h) => h.pid === bg.pid)
  await step('kill the background command', () => s.commands.kill(bg.pid), (x) => x === true)
  await step('its wait ends', async () => { try { await again.wait() } catch (e) { return e.constructor.name } }, (x) => x === 'CommandExitError')

  let term = ''
  const pty = await step('pty create', () => s.pty.create({ cols: 80, rows: 24, onData: (d) => { term += new TextDecoder().decode(d) } }), (h) => h.pid > 0)
  await step('pty input', () => s.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((40+2))\n')))
  await step('pty output', async () => {
    for (let i = 0; i < 100 && !term.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 50))
    return term.includes('pty-42') && term.includes('24 80')
  }, (x) => x === true)
  await step('pty kill', () => s.pty.kill(pty.pid), (x) => x === true)

  await step('write text', () => s.files.write('notes/a.txt', 'some text'), (e) => e.path.endsWith('notes/a.txt'))
  await step('read text', () => s.files.read('notes/a.txt'), (t) => t === 'some text')
  const big = new Uint8Array(1 << 20)
  for (let i = 0; i < big.length; i++) big[i] = (i * 7919) & 0xff
  await step('write 1 MiB binary', () => s.files.write('bin/blob', big.buffer))
  await step('read it back', async () => {
    const got = await s.files.read('bin/blob', { format: 'bytes' })
    return got.length === big.length && got.every((b, i) => b === big[i])
  }, (x) => x === true)
  await step('list a directory', () => s.files.list('notes'), (es) => es.length === 1 && es[0].name === 'a.txt')
  await step('the file is the command\'s', () => s.commands.run('cat notes/a.txt'), (r) => r.stdout === 'some text')

  await step('list sandboxes by metadata', async () => {
    const p = Sandbox.list({ query: { metadata: { suite: label } } })
    const items = await p.nextItems()
    return items.map((i) => i.sandboxId)
  }, (ids) => ids.length === 1 && ids[0] === s.sandboxId)
  await step('set timeout', () => s.setTimeout(300000))
  await step('get info', () => s.getInfo(), (i) => i.sandboxId === s.sandboxId && i.metadata.suite === label)
  await step('kill', () => s.kill())
  await step('killed: not listed', async () => {
    const items = await Sandbox.list({ query: { metadata: { suite: label } } }).nextItems()
    return items.length
  }, (n) => n === 0)

  if (failed) {
    console.log(`${failed} failed`)
    process.exit(1)
  }
}

main().catch((e) => { console.log(`FAIL ${e.constructor.name}: ${e.message}`); process.exit(1) })
