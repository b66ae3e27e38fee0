// Speed of E2B's JS SDK against serve --e2b, beside the same work over the
// native API from the same Node process (docs/e2b.md). Needs E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL, NSYS_CORTEX_API_URL and
// NSYS_CORTEX_API_TOKEN, and the SDK on NODE_PATH.
//   node bench.cjs [runs] [creates]
const { Sandbox } = require('e2b')

const runs = Number(process.argv[2] || 200)
const creates = Number(process.argv[3] || 100)
const api = process.env.NSYS_CORTEX_API_URL
const token = process.env.NSYS_CORTEX_API_TOKEN

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]
}
const ms = (x) => x.toFixed(2) + ' ms'

async function nativeExec(id, argv) {
  const r = await fetch(`${api}/v1/neurons/${id}/exec`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ argv }),
  })
  const j = await r.json()
  if (!r.ok || j.exitCode !== 0) throw new Error(`native exec: ${r.status} ${JSON.stringify(j)}`)
}

async function main() {
  const s = await Sandbox.create()
  // What commands.run('true') runs, run the same way natively.
  const argv = ['/bin/bash', '-l', '-c', 'true']
  for (let i = 0; i < 20; i++) { await s.commands.run('true'); await nativeExec(s.sandboxId, argv) }
  const sdk = [], native = []
  for (let i = 0; i < runs; i++) {
    // Interleaved, so both see the same machine.
    let t = performance.now(); await s.commands.run('true'); sdk.push(performance.now() - t)
    t = performance.now(); await nativeExec(s.sandboxId, argv); native.push(performance.now() - t)
  }
  await s.kill()
  console.log(`commands.run("true"), ${runs} runs: SDK p50 ${ms(pct(sdk, 0.5))} p99 ${ms(pct(sdk, 0.99))}; ` +
    `native exec of the same argv p50 ${ms(pct(native, 0.5))} p99 ${ms(pct(native, 0.99))}; ratio p50 ${(pct(sdk, 0.5) / pct(native, 0.5)).toFixed(2)}x`)

  const first = [], made = [], ran = []
  for (let i = 0; i < creates; i++) {
    const t = performance.now()
    const c = await Sandbox.create()
    const t1 = performance.now()
    await c.commands.run('true')
    const t2 = performance.now()
    first.push(t2 - t); made.push(t1 - t); ran.push(t2 - t1)
    await c.kill()
  }
  console.log(`create -> first command, ${creates} runs: p50 ${ms(pct(first, 0.5))} p99 ${ms(pct(first, 0.99))} max ${ms(Math.max(...first))}` +
    ` (the create alone p50 ${ms(pct(made, 0.5))} p99 ${ms(pct(made, 0.99))}; the first command p50 ${ms(pct(ran, 0.5))} p99 ${ms(pct(ran, 0.99))})`)
}

main().catch((e) => { console.log(`FAIL: ${e.constructor.name}: ${e.message}`); process.exit(1) })
