// E2B's pause on the qemu backend, once per pinned SDK version: a pause is
// our suspend, which on a VM keeps its memory, so the sandbox's processes go
// on after the wake — by a request to its port (lifecycle.autoResume) and by
// Sandbox.connect — as on E2B. Run by tests/e2b/run qemu (a cluster of the
// qemu backend under TCG). Requests go to *.localhost only (loopback).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { httpGet, httpGetServed } from './loopback.mjs'

// A request that wakes a VM waits for it (under TCG, seconds): 120 s; a server may take 30 s to answer.
const get = (url) => httpGet(url, {}, 120_000)
const getServed = (url) => httpGetServed(url, {}, 300)

const versions = ['e2b-2.20.1', 'e2b-latest']

for (const pkg of versions) {
  const { Sandbox } = await import(pkg)
  const version = (await import(`${pkg}/package.json`, { with: { type: 'json' } })).default.version
  const pause = (s) => (typeof s.pause === 'function' ? s.pause() : s.betaPause())

  describe(`e2b@${version} on VMs`, { concurrency: false }, () => {
    test('pause keeps processes: a request wakes the server, connect finds the counter going on', async () => {
      const s = await Sandbox.create({ timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
      try {
        // A counter (its file replaced whole each time: a read never sees it empty) and a server,
        // started in the background.
        const counter = await s.commands.run(
          'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done',
          { background: true },
        )
        await s.files.write('srv/index.html', `served by ${s.sandboxId}\n`)
        await s.commands.run('busybox httpd -f -p 8080 -h /home/user/srv', { background: true })
        const url = `http://${s.getHost(8080)}/index.html`
        assert.equal((await getServed(url)).status, 200)
        const count = async (box) => Number((await box.commands.run('cat /tmp/count')).stdout)
        const before = await count(s)

        await pause(s)
        assert.equal((await s.getInfo()).state, 'paused')
        // The request wakes it, and the server that was running answers it: no 502.
        const r = await get(url)
        assert.equal(r.status, 200, r.body)
        assert.equal(r.body, `served by ${s.sandboxId}\n`)
        assert.equal((await s.getInfo()).state, 'running')

        await pause(s)
        const back = await Sandbox.connect(s.sandboxId)
        assert.equal((await back.getInfo()).state, 'running')
        // The same process, still counting from where it was.
        assert.equal((await back.commands.run(`kill -0 ${counter.pid} && echo alive`)).stdout, 'alive\n')
        const pids = (await back.commands.list()).map((p) => p.pid)
        assert.ok(pids.includes(counter.pid), `${counter.pid} not in ${pids}`)
        const after = await count(back)
        assert.ok(after > before, `the counter went from ${before} to ${after}`)
        await new Promise((res) => setTimeout(res, 1000))
        assert.ok((await count(back)) > after, 'the counter stopped after the wake')
      } finally {
        await s.kill()
      }
    })
  })
}
