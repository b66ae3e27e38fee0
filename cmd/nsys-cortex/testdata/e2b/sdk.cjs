// E2B's official JavaScript SDK (npm e2b) against nsys-cortex serve --e2b:
// every call a program makes, each checked. Run by TestE2BSDK with
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL set, and the SDK on
// NODE_PATH. A failure prints the SDK's own error and exits 1.
const http = require('node:http')
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

async function refused(name, f, errorName) {
  try {
    await f()
    failed++
    console.log(`FAIL ${name}: no error`)
  } catch (e) {
    if (e.constructor.name !== errorName) {
      failed++
      console.log(`FAIL ${name}: ${e.constructor.name} (want ${errorName}): ${e.message}`)
      return
    }
    console.log(`ok   ${name} (${errorName})`)
  }
}

async function main() {
  const label = `run${process.pid}`
  const s = await step('create with metadata and envs', () => Sandbox.create({ metadata: { suite: label }, envs: { GREETING: 'hello' }, timeoutMs: 120000 }), (x) => !!x.sandboxId)
  if (!s) process.exit(1)

  let streamed = ''
  await step('run with streaming callbacks', () => s.commands.run('echo $GREETING; for i in 1 2 3; do echo $i; done; echo oops >&2', { onStdout: (d) => { streamed += d } }),
    (r) => r.exitCode === 0 && r.stdout === 'hello\n1\n2\n3\n' && r.stderr === 'oops\n' && streamed === r.stdout)
  await step('a non-zero exit is CommandExitError', async () => {
    try { await s.commands.run('exit 3') } catch (e) { return [e instanceof CommandExitError, e.exitCode] }
  }, (x) => x && x[0] === true && x[1] === 3)

  await step('a command as root is refused, not run as user', async () => {
    try { await s.commands.run('id -u', { user: 'root' }); return 'ran' } catch (e) { return `${e.constructor.name}: ${e.message}` }
  }, (x) => x !== 'ran' && x.includes('no root'))

  let echoed = ''
  const wc = await step('a command reading stdin', () => s.commands.run('wc -c', { background: true, stdin: true, onStdout: (d) => { echoed += d } }), (h) => h.pid > 0)
  await step('send stdin, close stdin', async () => { await s.commands.sendStdin(wc.pid, '12345'); await s.commands.closeStdin(wc.pid); return (await wc.wait()).stdout.trim() }, (x) => x === '5')

  const bg = await step('background command with stdin', () => s.commands.run('cat', { background: true, stdin: true }), (h) => h.pid > 0)
  await step('send stdin', () => s.commands.sendStdin(bg.pid, 'typed\n'))
  await step('list commands', () => s.commands.list(), (ps) => ps.some((p) => p.pid === bg.pid))
  let reattached = ''
  const again = await step('connect to the background command', () => s.commands.connect(bg.pid, { onStdout: (d) => { reattached += d } }), (h) => h.pid === bg.pid)
  await step('kill the background command', () => s.commands.kill(bg.pid), (x) => x === true)
  await step('its wait ends', async () => { try { await again.wait() } catch (e) { return e.constructor.name } }, (x) => x === 'CommandExitError')

  let term = ''
  const pty = await step('pty create', () => s.pty.create({ cols: 80, rows: 24, onData: (d) => { term += new TextDecoder().decode(d) } }), (h) => h.pid > 0)
  await step('pty input', () => s.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((40+2))\n')))
  await step('pty resize', () => s.pty.resize(pty.pid, { cols: 100, rows: 30 }))
  await step('pty output', async () => {
    for (let i = 0; i < 100 && !term.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 50))
    return term.includes('pty-42')
  }, (x) => x === true)
  await step('pty kill', () => s.pty.kill(pty.pid), (x) => x === true)

  await step('write text', () => s.files.write('notes/a.txt', 'some text'), (e) => e.path.endsWith('notes/a.txt'))
  await step('read text', () => s.files.read('notes/a.txt'), (t) => t === 'some text')
  const big = new Uint8Array(8 << 20)
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + (i >> 12)) & 255
  await step('upload 8 MiB binary', () => s.files.write('data/big.bin', big.buffer))
  await step('download 8 MiB binary', () => s.files.read('data/big.bin', { format: 'bytes' }),
    (b) => b.length === big.length && b.every((v, i) => v === big[i]))
  await step('upload gzip-encoded', async () => { await s.files.write('z.txt', 'zipped', { gzip: true }); return s.files.read('z.txt') }, (t) => t === 'zipped')
  await step('upload as octet-stream', async () => { await s.files.write('o.txt', 'octets', { useOctetStream: true }); return s.files.read('o.txt') }, (t) => t === 'octets')
  await step('write several files', () => s.files.write([{ path: 'many/one.txt', data: '1' }, { path: 'many/two.txt', data: '2' }]),
    (es) => es.length === 2 && es[1].path.endsWith('many/two.txt'))
  await step('list with depth', () => s.files.list('many', { depth: 2 }), (es) => es.map((e) => e.name).sort().join() === 'one.txt,two.txt')
  await step('exists', async () => [await s.files.exists('many/one.txt'), await s.files.exists('many/none')], (x) => x[0] && !x[1])
  await step('make a directory', () => s.files.makeDir('made'), (x) => x === true)
  await step('rename', () => s.files.rename('many/one.txt', 'made/one.txt'), (e) => e.path.endsWith('made/one.txt'))
  await step('info', () => s.files.getInfo('made/one.txt'), (i) => i.type === 'file' && i.size === 1)
  const seen = []
  await s.files.makeDir('watched/deep')
  const watcher = await step('watchDir (recursive)', () => s.files.watchDir('watched', (e) => seen.push(e), { recursive: true }), (h) => !!h)
  await s.files.write('watched/deep/x.txt', 'x')
  await step('its events', async () => {
    for (let i = 0; i < 100 && !seen.some((e) => e.name === 'deep/x.txt' && e.type === 'create'); i++) await new Promise((r) => setTimeout(r, 50))
    return seen.map((e) => `${e.type} ${e.name}`)
  }, (x) => x.includes('create deep/x.txt'))
  if (watcher) await step('stop the watch', () => watcher.stop())
  await step('remove', () => s.files.remove('many'))
  await step('removed', () => s.files.exists('many'), (x) => x === false)

  // Signed URLs: the SDK signs with the envd token. In E2B_SANDBOX_URL
  // mode its URL does not name the sandbox, so the header comes along.
  const viaSandboxHeader = { 'E2b-Sandbox-Id': s.sandboxId }
  await step('downloadUrl (signed, expiring)', async () => {
    const u = await s.downloadUrl('notes/a.txt', { useSignatureExpiration: 60 })
    const r = await fetch(u, { headers: viaSandboxHeader })
    return [r.status, await r.text(), new URL(u).searchParams.has('signature_expiration')]
  }, (x) => x[0] === 200 && x[1] === 'some text' && x[2])
  await step('uploadUrl (signed)', async () => {
    const form = new FormData()
    form.append('file', new Blob(['by url']), 'up.txt')
    const r = await fetch(await s.uploadUrl('up.txt'), { method: 'POST', body: form, headers: viaSandboxHeader })
    return [r.status, await s.files.read('up.txt')]
  }, (x) => x[0] === 200 && x[1] === 'by url')
  await step('a download URL does not upload', async () => {
    const u = new URL(await s.downloadUrl('up.txt'))
    const r = await fetch(u, { method: 'POST', body: 'x', headers: viaSandboxHeader })
    return r.status
  }, (x) => x === 401)

  // getHost: an HTTP server in the sandbox, reached by its host name.
  const api = new URL(process.env.E2B_API_URL)
  const byHost = (host, headers = {}) => new Promise((resolve, reject) => {
    const req = http.request({ host: api.hostname, port: api.port, path: '/hello.txt', headers: { ...headers, Host: host } }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve([res.statusCode, body]))
    })
    req.on('error', reject)
    req.end()
  })
  const web = 8000 + (process.pid % 1000)
  await step('an HTTP server in the sandbox', async () => {
    await s.files.write('site/hello.txt', 'served')
    await s.commands.run(`python3 -m http.server ${web} --bind 127.0.0.1 --directory site`, { background: true })
    return s.getHost(web)
  }, (h) => h === `${web}-${s.sandboxId}.${process.env.E2B_TEST_DOMAIN}`)
  await step('reached through getHost', async () => {
    let got
    for (let i = 0; i < 100; i++) {
      got = await byHost(s.getHost(web))
      if (got[0] === 200) break
      await new Promise((r) => setTimeout(r, 100))
    }
    return got
  }, (x) => x[0] === 200 && x[1] === 'served')
  const closed = await step('create with public traffic off', () => Sandbox.create({ metadata: { suite: label + 'p' }, network: { allowPublicTraffic: false } }), (x) => !!x.trafficAccessToken)
  if (closed) {
    await closed.commands.run(`mkdir -p site && echo private > site/hello.txt && (python3 -m http.server ${web} --bind 127.0.0.1 --directory site >/dev/null 2>&1 &)`)
    await step('its port needs the traffic token', async () => {
      let got
      for (let i = 0; i < 100; i++) {
        got = await byHost(closed.getHost(web), { 'e2b-traffic-access-token': closed.trafficAccessToken })
        if (got[0] === 200) break
        await new Promise((r) => setTimeout(r, 100))
      }
      return [got[0], got[1], (await byHost(closed.getHost(web)))[0]]
    }, (x) => x[0] === 200 && x[1] === 'private\n' && x[2] === 401)
    await closed.kill()
  }

  await step('fork', async () => {
    const [f] = await s.fork({ timeoutMs: 60000 })
    if (f instanceof Error) throw f
    const got = [f.sandboxId !== s.sandboxId, await f.files.read('notes/a.txt')]
    await f.kill()
    return got
  }, (x) => x[0] && x[1] === 'some text')

  await step('list with a metadata filter', () => Sandbox.list({ query: { metadata: { suite: label } } }).nextItems(),
    (l) => l.length === 1 && l[0].sandboxId === s.sandboxId && l[0].metadata.suite === label)
  await step('set timeout', () => s.setTimeout(60000))
  await step('info after set timeout', () => s.getInfo(), (i) => i.state === 'running' && i.endAt - Date.now() <= 61000)
  await step('metrics', () => s.getMetrics(), (m) => m.length >= 1)

  const keeper = await step('a process to keep across pause', () => s.commands.run('sleep 600', { background: true }), (h) => h.pid > 0)
  await step('pause', () => s.pause())
  await step('list paused', () => Sandbox.list({ query: { metadata: { suite: label }, state: ['paused'] } }).nextItems(), (l) => l.length === 1)
  const back = await step('connect resumes', () => Sandbox.connect(s.sandboxId), (x) => !!x)
  await step('the process is still there', () => back.commands.list(), (ps) => ps.some((p) => p.pid === keeper.pid))

  const short = await step('create with a short timeout', () => Sandbox.create({ metadata: { suite: label + 'x' }, timeoutMs: 2000 }), (x) => !!x.sandboxId)
  await step('it expires', async () => {
    for (let i = 0; i < 100; i++) {
      if (!(await short.isRunning().catch(() => false))) return true
      await new Promise((r) => setTimeout(r, 200))
    }
    return false
  }, (x) => x === true)

  await step('kill', () => s.kill())
  await refused('the killed sandbox is gone', () => Sandbox.getInfo(s.sandboxId), 'SandboxNotFoundError')
  await refused('a wrong key', () => Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(64) }), 'AuthenticationError')

  if (failed) {
    console.log(`${failed} step(s) failed`)
    process.exit(1)
  }
  console.log('all steps passed')
}

main().catch((e) => { console.log(`FAIL: ${e.constructor.name}: ${e.message}`); process.exit(1) })
