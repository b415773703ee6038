// The unmodified e2b SDK against a live cluster, once per pinned version
// (package.json). Run by tests/e2b/run, which starts a direct-mode cluster
// and sets E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. See docs/e2b.md.
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'

import { httpGet, httpGetServed } from './loopback.mjs'

const versions = ['e2b-2.20.1', 'e2b-latest']
// A pause keeps a jail's processes where its worker has the project's CRIU (scripts/criu, which
// scripts/deps runs; the worker's --criu=auto finds it there), as E2B's pause does; without it,
// its files only (docs/e2b.md).
const criu = existsSync('/var/lib/space/criu/criu')

for (const pkg of versions) {
  const e2b = await import(pkg)
  const { Sandbox, CommandExitError, AuthenticationError, NotFoundError, SandboxError } = e2b
  const version = (await import(`${pkg}/package.json`, { with: { type: 'json' } })).default.version

  describe(`e2b@${version}`, { concurrency: false }, () => {
    const tag = `${pkg}-${process.pid}`
    let sbx

    before(async () => {
      sbx = await Sandbox.create({ metadata: { suite: tag, kind: 'main' }, envs: { SANDBOX_WIDE: 'yes' } })
    })
    after(async () => {
      if (sbx) await sbx.kill()
    })

    // The sandbox's egress profile, read from the public API (tests/e2b/run sets SPACE_API_URL).
    const egressOf = async (id) => {
      const r = await fetch(`${process.env.SPACE_API_URL}/v1/sandboxes/${id}`, {
        headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` },
      })
      assert.equal(r.status, 200)
      return (await r.json()).egress
    }

    test('network options become the sandbox egress profile (docs/e2b.md)', async () => {
      const allow = await Sandbox.create({
        metadata: { suite: tag },
        network: { denyOut: ['0.0.0.0/0'], allowOut: ['example.com', '8.8.8.8'] },
      })
      try {
        assert.equal(await egressOf(allow.sandboxId), 'e2b-allow-out')
        if (typeof allow.updateNetwork === 'function') {
          await allow.updateNetwork({ allowInternetAccess: true })
          assert.equal(await egressOf(allow.sandboxId), 'public')
          await allow.updateNetwork({})
          assert.equal(await egressOf(allow.sandboxId), 'none')
        }
      } finally {
        await allow.kill()
      }
      const off = await Sandbox.create({ metadata: { suite: tag }, allowInternetAccess: false })
      try {
        assert.equal(await egressOf(off.sandboxId), 'none')
      } finally {
        await off.kill()
      }
      await assert.rejects(
        Sandbox.create({ metadata: { suite: tag }, network: { denyOut: ['8.8.8.8'] } }),
        (err) => /only 0\.0\.0\.0\/0/.test(String(err.message)),
      )
    })

    test('commands.run: stdout, stderr, exit code, cwd, envs and sandbox-wide envVars', async () => {
      const r = await sbx.commands.run('echo out; echo err >&2; pwd; echo "$SANDBOX_WIDE $ONE"', {
        cwd: '/tmp',
        envs: { ONE: '1' },
      })
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'out\n/tmp\nyes 1\n')
      assert.equal(r.stderr, 'err\n')
    })

    test('commands.run: a 1 MiB command runs whole (its script moves into the environment)', async () => {
      const mib = 1 << 20
      const r = await sbx.commands.run(`echo ${'x'.repeat(mib)} | wc -c`)
      assert.equal(r.stdout, `${mib + 1}\n`)
      // Cut between UTF-8 characters; $0 and the arguments as from -c; no piece left in the environment.
      const u = '\u00e9'.repeat(300_000)
      const r2 = await sbx.commands.run(`printf %s '${u}' | wc -c; echo "$0 $#"; env | grep -c _SPACE_E2B_CMD_ || true`)
      assert.equal(r2.stdout, '600000\n/bin/bash 0\n0\n')
      // Past what Linux passes a program: refused before anything runs.
      await assert.rejects(sbx.commands.run(`echo ${'x'.repeat(2 * mib)}`), (err) => {
        assert.match(String(err.message), /the command is longer than 1966080 bytes/)
        return true
      })
    })

    test('isRunning: false once paused, killed or timed out (envd /health answers 502)', async () => {
      const s = await Sandbox.create({ metadata: { suite: tag, kind: 'alive' } })
      const health = () =>
        fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
          headers: { 'E2b-Sandbox-Id': s.sandboxId, 'X-Access-Token': s.envdAccessToken },
        })
      try {
        assert.equal(await s.isRunning(), true)
        assert.equal((await health()).status, 204)
        if (typeof s.pause === 'function') await s.pause()
        else await s.betaPause()
        assert.equal(await s.isRunning(), false, 'paused')
        const res = await health()
        assert.equal(res.status, 502)
        assert.deepEqual(await res.json(), {
          sandboxId: s.sandboxId,
          message: 'The sandbox is not running (it is suspended)',
          code: 502,
        })
        await Sandbox.connect(s.sandboxId)
        assert.equal(await s.isRunning(), true, 'woken')
      } finally {
        await s.kill()
      }
      assert.equal(await s.isRunning(), false, 'killed')
      const gone = await health()
      assert.equal(gone.status, 502)
      assert.equal((await gone.json()).message, 'The sandbox was not found')
      const short = await Sandbox.create({ metadata: { suite: tag, kind: 'short' }, timeoutMs: 2000 })
      assert.equal(await short.isRunning(), true)
      let running = true
      for (let i = 0; i < 120 && running; i++) {
        await new Promise((r) => setTimeout(r, 500))
        running = await short.isRunning()
      }
      assert.equal(running, false, 'timed out')
    })

    test('commands.run: a failing command throws CommandExitError with its code and output', async () => {
      await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
        assert.ok(err instanceof CommandExitError, `got ${err}`)
        assert.equal(err.exitCode, 3)
        assert.equal(err.stdout, 'partial\n')
        return true
      })
    })

    test('commands.run: streams output to callbacks', async () => {
      const seen = []
      await sbx.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (d) => seen.push(d) })
      assert.equal(seen.join(''), 'line1\nline2\nline3\n')
    })

    test('background commands: connect, list, sendStdin, kill', async () => {
      const h = await sbx.commands.run('read line; echo "got $line"; sleep 600', { background: true, stdin: true })
      assert.ok(h.pid > 0)
      const listed = await sbx.commands.list()
      assert.ok(listed.some((p) => p.pid === h.pid), 'the background command is listed')
      // Connect gives the output after it (as envd's): connect, then make the command write.
      const again = await sbx.commands.connect(h.pid)
      await sbx.commands.sendStdin(h.pid, 'hello\n')
      // The two handles read two streams: wait for both (neither is ordered against the other).
      for (let i = 0; i < 100 && !(again.stdout.includes('got hello') && h.stdout.includes('got hello')); i++) {
        await new Promise((r) => setTimeout(r, 100))
      }
      assert.equal(again.stdout, 'got hello\n')
      assert.match(h.stdout, /got hello/, 'the handle of commands.run has it too')
      assert.equal(await sbx.commands.kill(h.pid), true)
      await assert.rejects(h.wait(), (err) => err instanceof CommandExitError)
      assert.equal(await sbx.commands.kill(h.pid), false, 'a second kill finds nothing')
    })

    test('process tags; commands.connect gives only the output after it (docs/e2b.md)', async () => {
      // commands.run takes no tag: envd's Start does (StartRequest.tag), so it is called as the SDK calls it.
      const rpc = sbx.commands.rpc
      const ptag = `tag ${randomBytes(4).toString('hex')}`
      const ac = new AbortController()
      const started = rpc.start(
        { process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo before; read x; echo "after $x"; sleep 600'] }, tag: ptag, stdin: true },
        { signal: ac.signal },
      )
      const it = started[Symbol.asyncIterator]()
      let pid = 0
      let seen = ''
      while (!seen.includes('before\n')) {
        const { value, done } = await it.next()
        assert.ok(!done, `the start stream ended early, after ${JSON.stringify(seen)}`)
        const ev = value.event?.event
        if (ev?.case === 'start') pid = ev.value.pid
        else if (ev?.case === 'data' && ev.value.output.case === 'stdout') seen += new TextDecoder().decode(ev.value.output.value)
      }
      assert.ok(pid > 0)
      assert.equal(seen, 'before\n', 'Start streams from the start')
      ac.abort()
      await it.return?.().catch(() => {})

      const listed = (await sbx.commands.list()).find((p) => p.pid === pid)
      assert.ok(listed, 'the tagged command is listed')
      assert.equal(listed.tag, ptag)

      // Connect after "before": the handle gets what comes after, not what came before.
      const again = await sbx.commands.connect(pid)
      await sbx.commands.sendStdin(pid, 'go\n')
      for (let i = 0; i < 100 && !again.stdout.includes('after go'); i++) await new Promise((r) => setTimeout(r, 100))
      assert.equal(again.stdout, 'after go\n')

      // Connect by tag: the start event names the tagged process.
      const ac2 = new AbortController()
      const byTag = rpc.connect({ process: { selector: { case: 'tag', value: ptag } } }, { signal: ac2.signal })
      const first = await byTag[Symbol.asyncIterator]().next()
      assert.equal(first.value.event.event.case, 'start')
      assert.equal(first.value.event.event.value.pid, pid)
      ac2.abort()

      // An unknown tag is not_found, as envd's; SendSignal by tag kills it, then the tag is gone.
      const unknown = rpc.connect({ process: { selector: { case: 'tag', value: `${ptag}-none` } } })
      await assert.rejects(unknown[Symbol.asyncIterator]().next(), (err) => err.code === 5, 'an unknown tag is not_found')
      await rpc.sendSignal({ process: { selector: { case: 'tag', value: ptag } }, signal: 9 })
      await assert.rejects(again.wait(), (err) => err instanceof CommandExitError)
      await assert.rejects(
        rpc.sendSignal({ process: { selector: { case: 'tag', value: ptag } }, signal: 9 }),
        (err) => err.code === 5,
        'a killed process has no tag any more',
      )
      assert.equal(await sbx.commands.kill(pid), false)
    })

    test('files: write, read, exists, list, makeDir, rename, remove', async () => {
      const dir = `/tmp/files-${randomBytes(4).toString('hex')}`
      assert.equal(await sbx.files.makeDir(`${dir}/sub`), true)
      assert.equal(await sbx.files.makeDir(`${dir}/sub`), false, 'makeDir of an existing directory')
      const info = await sbx.files.write(`${dir}/a.txt`, 'hello world')
      assert.equal(info.path, `${dir}/a.txt`)
      assert.equal(await sbx.files.read(`${dir}/a.txt`), 'hello world')
      assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
      assert.equal(await sbx.files.exists(`${dir}/missing`), false)
      const names = (await sbx.files.list(dir)).map((e) => `${e.name}:${e.type}`).sort()
      assert.deepEqual(names, ['a.txt:file', 'sub:dir'])
      await sbx.files.rename(`${dir}/a.txt`, `${dir}/b.txt`)
      assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
      assert.equal(await sbx.files.read(`${dir}/b.txt`), 'hello world')
      await sbx.files.remove(dir)
      assert.equal(await sbx.files.exists(dir), false)
      await assert.rejects(sbx.files.read(`${dir}/b.txt`), (err) => err.name === 'FileNotFoundError' || err instanceof NotFoundError)
    })

    test("E2B's default user: commands run as user in /home/user, relative paths are from its home", async () => {
      assert.equal((await sbx.commands.run('whoami')).stdout, 'user\n')
      assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n')
      assert.equal((await sbx.commands.run('echo $HOME')).stdout, '/home/user\n')
      const name = `rel-${randomBytes(4).toString('hex')}.txt`
      const info = await sbx.files.write(name, 'relative')
      assert.equal(info.path, `/home/user/${name}`)
      assert.equal(info.name, name)
      assert.equal(await sbx.files.read(name), 'relative')
      assert.equal(await sbx.files.read(`/home/user/${name}`), 'relative')
      const got = await sbx.files.getInfo(name)
      assert.equal(got.path, `/home/user/${name}`)
      assert.equal(`${got.owner}:${got.group}`, 'user:user')
      assert.equal((await sbx.commands.run(`cat /home/user/${name}`)).stdout, 'relative')
      assert.equal((await sbx.commands.run(`stat -c %U:%G /home/user/${name}`)).stdout, 'user:user\n')
      // A relative cwd is from the home too.
      assert.equal(await sbx.files.makeDir('cwd-sub'), true)
      assert.equal((await sbx.commands.run('pwd', { cwd: 'cwd-sub' })).stdout, '/home/user/cwd-sub\n')
      // root when asked for: its home, its files.
      assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
      assert.equal((await sbx.commands.run('pwd', { user: 'root' })).stdout, '/root\n')
      const mine = await sbx.files.write(name, 'root', { user: 'root' })
      assert.equal(mine.path, `/root/${name}`)
      assert.equal((await sbx.commands.run(`stat -c %U /root/${name}`, { user: 'root' })).stdout, 'root\n')
      assert.equal(await sbx.files.read(name, { user: 'root' }), 'root')
      assert.equal(await sbx.files.read(name), 'relative', "user's own file is untouched")
    })

    test('files.write makes the missing parent directories: one file, several, streamed', async () => {
      const top = `nested-${randomBytes(4).toString('hex')}`
      const one = await sbx.files.write(`${top}/a/b/one.txt`, 'one')
      assert.equal(one.path, `/home/user/${top}/a/b/one.txt`)
      assert.equal(await sbx.files.read(`${top}/a/b/one.txt`), 'one')
      // Several at once (one multipart request), relative and absolute.
      const many = await sbx.files.write([
        { path: `${top}/m/n/1.txt`, data: '1' },
        { path: `/tmp/${top}/x/y/2.txt`, data: '2' },
        { path: `/home/user/${top}/a/b/3.txt`, data: '3' },
      ])
      assert.deepEqual(
        many.map((f) => `${f.name}:${f.path}`),
        [`1.txt:/home/user/${top}/m/n/1.txt`, `2.txt:/tmp/${top}/x/y/2.txt`, `3.txt:/home/user/${top}/a/b/3.txt`],
      )
      assert.equal(await sbx.files.read(`/tmp/${top}/x/y/2.txt`), '2')
      assert.equal(await sbx.files.read(`${top}/m/n/1.txt`), '1')
      if (typeof sbx.files.writeFiles === 'function') {
        const w = await sbx.files.writeFiles([{ path: `${top}/wf/deep/f.txt`, data: 'wf' }])
        assert.equal(w[0].path, `/home/user/${top}/wf/deep/f.txt`)
      }
      // An octet-stream upload (envd 0.5.7's) makes them too.
      const streamed = await sbx.files.write(`${top}/s/t/streamed.bin`, new Blob(['streamed']), { useOctetStream: true })
      assert.equal(streamed.path, `/home/user/${top}/s/t/streamed.bin`)
      assert.equal(await sbx.files.read(`${top}/s/t/streamed.bin`), 'streamed')
      // What was made belongs to the user, directories 0755.
      const st = await sbx.commands.run(`stat -c '%U:%G %a' ${top} ${top}/a/b /tmp/${top}/x/y /tmp/${top}/x/y/2.txt`)
      assert.equal(st.stdout, 'user:user 755\n'.repeat(3) + 'user:user 644\n')
      // A rename into a directory that is not there yet makes it, as envd does.
      await sbx.files.rename(`${top}/a/b/one.txt`, `${top}/r/s/one.txt`)
      assert.equal(await sbx.files.read(`${top}/r/s/one.txt`), 'one')
      await sbx.files.remove(top)
      await sbx.files.remove(`/tmp/${top}`)
    })

    test("files as user go where root's can, as on E2B: what is made is the user's", async () => {
      // envd's file calls act as root and give the user what they make.
      const etc = await sbx.files.write('/etc/e2b-x', 'x')
      assert.equal(etc.path, '/etc/e2b-x')
      await sbx.files.write('/root/nested/dir/f', 'f')
      assert.equal(await sbx.files.read('/root/nested/dir/f'), 'f')
      const w = await sbx.files.write([
        { path: 'fine.txt', data: 'fine' },
        { path: '/etc/e2b-y', data: 'y' },
      ])
      assert.deepEqual(w.map((e) => e.path), ['/home/user/fine.txt', '/etc/e2b-y'])
      assert.equal(await sbx.files.makeDir('/srv/a/b'), true)
      const st = await sbx.commands.run(
        'stat -c %U:%G /etc/e2b-x /etc/e2b-y /root/nested /root/nested/dir /root/nested/dir/f /srv/a /srv/a/b /root /etc',
        { user: 'root' },
      )
      assert.equal(st.stdout, 'user:user\n'.repeat(7) + 'root:root\n'.repeat(2))
      // A root file it overwrites is the user's after, as envd chowns it.
      await sbx.commands.run('echo r > /etc/e2b-root && chmod 644 /etc/e2b-root', { user: 'root' })
      await sbx.files.write('/etc/e2b-root', 'u')
      assert.equal((await sbx.commands.run('stat -c %U:%G /etc/e2b-root; cat /etc/e2b-root')).stdout, 'user:user\nu')
      // A rename moves without chowning; the directory it makes is the user's.
      await sbx.commands.run('echo m > /etc/e2b-move', { user: 'root' })
      await sbx.files.rename('/etc/e2b-move', '/srv/m/n/moved')
      assert.equal((await sbx.commands.run('stat -c %U:%G /srv/m/n /srv/m/n/moved')).stdout, 'user:user\nroot:root\n')
      // A command of the user still has the user's rights only; root's too.
      await assert.rejects(sbx.commands.run('touch /root/planted.txt'), (err) => err instanceof CommandExitError)
      await sbx.files.write('/root/planted-by-root.txt', 'ok', { user: 'root' })
      assert.equal((await sbx.commands.run('stat -c %U /root/planted-by-root.txt', { user: 'root' })).stdout, 'root\n')
      await sbx.commands.run('rm -rf /etc/e2b-x /etc/e2b-y /etc/e2b-root /root/nested /srv/a /srv/m /home/user/fine.txt', { user: 'root' })
    })

    test("Sandbox.connect gives a sandbox without E2B's user one (uid 1000, /home/user)", async () => {
      const s = await Sandbox.create({ metadata: { suite: tag, kind: 'nouser' } })
      try {
        await s.commands.run("sed -i '/^user:/d' /etc/passwd /etc/group && rm -rf /home/user", { user: 'root' })
        await assert.rejects(s.commands.run('true'), (err) => /user 'user' not found/.test(String(err.message)))
        const again = await Sandbox.connect(s.sandboxId)
        assert.equal((await again.commands.run('whoami')).stdout, 'user\n')
        assert.equal((await again.commands.run('pwd')).stdout, '/home/user\n')
        assert.equal((await again.commands.run('id -u; id -g; stat -c %U:%G /home/user')).stdout, '1000\n1000\nuser:user\n')
        await again.files.write('back.txt', 'back')
        assert.equal((await again.commands.run('stat -c %U /home/user/back.txt')).stdout, 'user\n')
      } finally {
        await s.kill()
      }
    })

    test("files: as on envd, root's rights for any user; the user decides relative paths and what it owns", async () => {
      await sbx.commands.run('echo secret > /root/secret.txt && chmod 600 /root/secret.txt', { user: 'root' })
      assert.equal(await sbx.files.read('/root/secret.txt', { user: 'root' }), 'secret\n')
      // As user too: envd reads, lists and removes as root.
      assert.equal(await sbx.files.read('/root/secret.txt', { user: 'user' }), 'secret\n')
      assert.ok((await sbx.files.list('/root', { user: 'user' })).some((e) => e.name === 'secret.txt'))
      await sbx.files.remove('/root/secret.txt', { user: 'user' })
      assert.equal((await sbx.commands.run('test -e /root/secret.txt || echo gone', { user: 'root' })).stdout, 'gone\n')
      // A file written as user belongs to user, and a relative path is from its home.
      await sbx.files.write('mine.txt', 'mine', { user: 'user' })
      assert.equal((await sbx.commands.run('stat -c %U:%G /home/user/mine.txt')).stdout, 'user:user\n')
      assert.equal(await sbx.files.read('/home/user/mine.txt', { user: 'user' }), 'mine')
      // As root: root's.
      await sbx.files.write('/tmp/roots.txt', 'r', { user: 'root' })
      assert.equal((await sbx.commands.run('stat -c %U:%G /tmp/roots.txt')).stdout, 'root:root\n')
    })

    test('files.watchDir: create, write, rename and remove arrive as events (polled)', async () => {
      const dir = `/tmp/watch-${randomBytes(4).toString('hex')}`
      await sbx.files.makeDir(dir)
      const events = []
      const handle = await sbx.files.watchDir(dir, (ev) => events.push(`${ev.type}:${ev.name}`))
      const until = async (want) => {
        for (let i = 0; i < 100 && !events.includes(want); i++) await new Promise((r) => setTimeout(r, 100))
        assert.ok(events.includes(want), `${want} among ${JSON.stringify(events)}`)
      }
      try {
        await sbx.files.write(`${dir}/a.txt`, 'one')
        await until('create:a.txt')
        await sbx.files.write(`${dir}/a.txt`, 'a longer content')
        await until('write:a.txt')
        await sbx.files.rename(`${dir}/a.txt`, `${dir}/b.txt`)
        await until('remove:a.txt')
        await until('create:b.txt')
        await sbx.files.remove(`${dir}/b.txt`)
        await until('remove:b.txt')
      } finally {
        await handle.stop()
      }
      await assert.rejects(sbx.files.watchDir(`${dir}/missing`, () => {}), (err) => err.name === 'FileNotFoundError' || err instanceof NotFoundError)
      // The polled watcher the Python SDK's sync watch_dir uses, through the SDK's own Connect client.
      const rpc = sbx.files.rpc
      const { watcherId } = await rpc.createWatcher({ path: dir })
      await sbx.files.write(`${dir}/c.txt`, 'x')
      const got = await rpc.getWatcherEvents({ watcherId })
      assert.deepEqual(got.events.map((e) => `${e.type}:${e.name}`), ['1:c.txt'], 'one CREATE (type 1)')
      assert.deepEqual((await rpc.getWatcherEvents({ watcherId })).events, [], 'nothing changed since')
      await rpc.removeWatcher({ watcherId })
      await assert.rejects(rpc.getWatcherEvents({ watcherId }), (err) => err.code === 5, 'a removed watcher is not_found')
      await sbx.files.remove(dir)
    })

    test('files: a large file goes through whole', async () => {
      const big = randomBytes(24 * 1024 * 1024)
      await sbx.files.write('/tmp/big.bin', new Blob([big]))
      const back = Buffer.from(await sbx.files.read('/tmp/big.bin', { format: 'bytes' }))
      assert.equal(back.length, big.length)
      assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(big).digest('hex'))
      const r = await sbx.commands.run('wc -c < /tmp/big.bin')
      assert.equal(r.stdout.trim(), String(big.length))
    })

    test('signed URLs: uploadUrl and downloadUrl without headers, for their path, operation, user and sandbox', async () => {
      const path = `/tmp/signed-${pkg}.txt`
      const refused = async (res, message) => {
        assert.equal(res.status, 401)
        assert.deepEqual(await res.json(), { code: 401, message })
      }
      const form = (text) => {
        const f = new FormData()
        f.append('file', new Blob([text]), 'ignored-name.txt')
        return f
      }
      // Upload: a plain multipart POST to the URL, no header at all.
      const up = await sbx.uploadUrl(path)
      assert.match(up, /[?&]signature=v1_/)
      assert.doesNotMatch(up, /signature_expiration/)
      const w = await fetch(up, { method: 'POST', body: form('signed upload\n') })
      assert.equal(w.status, 200)
      assert.equal((await w.json())[0].path, path)
      assert.equal(await sbx.files.read(path), 'signed upload\n')
      assert.equal((await sbx.commands.run(`stat -c %U ${path}`)).stdout, 'user\n')
      // Download: the bytes, fetched without headers.
      const down = await sbx.downloadUrl(path)
      const d = await fetch(down)
      assert.equal(d.status, 200)
      assert.equal(await d.text(), 'signed upload\n')
      // Sandbox.connect mints another token: its URLs work, and so do the first one's.
      const again = await Sandbox.connect(sbx.sandboxId)
      assert.notEqual(again.envdAccessToken, sbx.envdAccessToken)
      assert.equal(await (await fetch(await again.downloadUrl(path))).text(), 'signed upload\n')
      assert.equal(await (await fetch(down)).text(), 'signed upload\n')
      // A user named: the signature covers it; a relative path is from that user's home.
      const upRoot = await sbx.uploadUrl('signed-root.txt', { user: 'root' })
      assert.match(upRoot, /[?&]username=root/)
      const wr = await fetch(upRoot, { method: 'POST', body: form('as root\n') })
      assert.equal(wr.status, 200)
      assert.equal((await wr.json())[0].path, '/root/signed-root.txt')
      assert.equal(await sbx.files.read('/root/signed-root.txt'), 'as root\n')

      // An expiration in the future works; in the past it is refused (envd's message).
      const later = await sbx.downloadUrl(path, { useSignatureExpiration: 60 })
      assert.match(later, /[?&]signature_expiration=\d+/)
      assert.equal(await (await fetch(later)).text(), 'signed upload\n')
      const expired = await sbx.downloadUrl(path, { useSignatureExpiration: -10 })
      await refused(await fetch(expired), 'signature is already expired')
      const expiredUp = await sbx.uploadUrl(path, { useSignatureExpiration: -10 })
      await refused(await fetch(expiredUp, { method: 'POST', body: form('late\n') }), 'signature is already expired')
      // A later expiration forged onto it does not match its signature.
      const forged = new URL(expired)
      forged.searchParams.set('signature_expiration', String(Math.floor(Date.now() / 1000) + 3600))
      await refused(await fetch(forged), 'invalid signature')
      const junk = new URL(later)
      junk.searchParams.set('signature_expiration', 'soon')
      assert.equal((await fetch(junk)).status, 400)

      // Tampered: another path, user or operation, a changed signature.
      const other = new URL(down)
      other.searchParams.set('path', '/etc/passwd')
      await refused(await fetch(other), 'invalid signature')
      const asRoot = new URL(down)
      asRoot.searchParams.set('username', 'root')
      await refused(await fetch(asRoot), 'invalid signature')
      await refused(await fetch(down, { method: 'POST', body: form('written with a read URL\n') }), 'invalid signature')
      await refused(await fetch(up), 'invalid signature')
      const changed = new URL(down)
      const sig = changed.searchParams.get('signature')
      changed.searchParams.set('signature', sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A'))
      await refused(await fetch(changed), 'invalid signature')
      assert.equal(await sbx.files.read(path), 'signed upload\n', 'nothing refused was written')

      // Another sandbox: its own URL reads its own file; this sandbox's URL named for it is refused.
      const s2 = await Sandbox.create({ metadata: { suite: tag, kind: 'signed' } })
      try {
        await s2.files.write(path, 'the other sandbox\n')
        assert.equal(await (await fetch(await s2.downloadUrl(path))).text(), 'the other sandbox\n')
        await refused(await fetch(down, { headers: { 'E2b-Sandbox-Id': s2.sandboxId } }), 'invalid signature')
        await refused(
          await fetch(up, { method: 'POST', body: form('x\n'), headers: { 'E2b-Sandbox-Id': s2.sandboxId } }),
          'invalid signature',
        )
        assert.equal(await s2.files.read(path), 'the other sandbox\n')
        assert.equal(await (await fetch(down)).text(), 'signed upload\n')
      } finally {
        await s2.kill()
      }
    })

    test('list with a metadata filter, getInfo, setTimeout', async () => {
      const found = await Sandbox.list({ query: { metadata: { suite: tag, kind: 'main' } } }).nextItems()
      assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])
      const none = await Sandbox.list({ query: { metadata: { suite: tag, kind: 'nothing' } } }).nextItems()
      assert.equal(none.length, 0)
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.state, 'running')
      assert.deepEqual(info.metadata, { suite: tag, kind: 'main' })
      await sbx.setTimeout(600_000)
      const later = await sbx.getInfo()
      const left = later.endAt.getTime() - Date.now()
      assert.ok(left > 500_000 && left <= 600_000, `endAt ${later.endAt.toISOString()}`)
    })

    test('getMetrics: a sample of the running sandbox', async () => {
      const metrics = await sbx.getMetrics()
      assert.ok(metrics.length >= 1, `no metrics: ${JSON.stringify(metrics)}`)
      const m = metrics[metrics.length - 1]
      assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()))
      assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
      assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, `cpuUsedPct ${m.cpuUsedPct}`)
      assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, `memUsed ${m.memUsed} memTotal ${m.memTotal}`)
    })

    test('pause, then connect brings it back with its files and, with CRIU, its processes', async (t) => {
      const s = await Sandbox.create({ metadata: { suite: tag, kind: 'pause' } })
      try {
        await s.files.write('/tmp/keep.txt', 'kept')
        const counter = await s.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true })
        if (typeof s.pause === 'function') await s.pause()
        else await s.betaPause()
        assert.equal((await s.getInfo()).state, 'paused')
        const paused = typeof Sandbox.pause === 'function' ? await Sandbox.pause(s.sandboxId) : false
        assert.equal(paused, false, 'pausing a paused sandbox answers 409: false')
        const back = await Sandbox.connect(s.sandboxId)
        assert.equal((await back.getInfo()).state, 'running')
        assert.equal(await back.files.read('/tmp/keep.txt'), 'kept')
        assert.equal((await back.commands.run('echo alive')).stdout, 'alive\n')
        const listed = (await back.commands.list()).some((p) => p.pid === counter.pid)
        if (!criu) {
          t.diagnostic('no CRIU on this host (scripts/criu): the pause kept files only')
          assert.equal(listed, false)
          return
        }
        assert.ok(listed, 'the background command is still running after the pause')
        const n = Number(await back.files.read('/tmp/count'))
        await new Promise((r) => setTimeout(r, 500))
        assert.ok(Number(await back.files.read('/tmp/count')) > n, 'the counter goes on from where it stood')
      } finally {
        assert.equal(await Sandbox.kill(s.sandboxId), true)
        assert.equal(await Sandbox.kill(s.sandboxId), false, 'a second kill returns false')
      }
    })

    // A page served by busybox httpd on port in sandbox s, from ~/srv-<port> (the default user's).
    const serve = async (s, port, page) => {
      await s.files.write(`srv-${port}/index.html`, page)
      await s.commands.run(`busybox httpd -f -p ${port} -h /home/user/srv-${port}`, { background: true })
    }

    test('getHost: a server in the sandbox is reached through the data plane (public by default)', async () => {
      const page = `hello from ${sbx.sandboxId}\n`
      await serve(sbx, 8080, page)
      const host = sbx.getHost(8080)
      assert.match(host, new RegExp(`^8080-${sbx.sandboxId}\\.localhost:\\d+$`), host)
      const r = await httpGetServed(`http://${host}/index.html`)
      assert.equal(r.status, 200, r.body)
      assert.equal(r.body, page)
      assert.equal(sbx.trafficAccessToken, undefined, 'a public sandbox has no traffic token')
      assert.equal(sbx.sandboxDomain, host.slice(host.indexOf('.') + 1))
      const info = await sbx.getInfo()
      // 2.20.1's getInfo leaves the domain out.
      if (info.sandboxDomain !== undefined) assert.equal(info.sandboxDomain, sbx.sandboxDomain)
      assert.equal(info.network?.allowPublicTraffic, true)
      // Nothing listens on another port: the data plane's 502.
      assert.equal((await httpGet(`http://${sbx.getHost(8081)}/`)).status, 502)
    })

    test('allowPublicTraffic: false — the page only with e2b-traffic-access-token', async () => {
      const s = await Sandbox.create({ metadata: { suite: tag, kind: 'private' }, network: { allowPublicTraffic: false } })
      try {
        assert.equal(typeof s.trafficAccessToken, 'string')
        assert.ok(s.trafficAccessToken.length > 0)
        const page = `private ${s.sandboxId}\n`
        await serve(s, 8080, page)
        const url = `http://${s.getHost(8080)}/index.html`
        const token = { 'e2b-traffic-access-token': s.trafficAccessToken }
        const r = await httpGetServed(url, token)
        assert.equal(r.status, 200, r.body)
        assert.equal(r.body, page)
        assert.equal((await httpGet(url)).status, 401, 'no token')
        assert.equal((await httpGet(url, { 'e2b-traffic-access-token': `${s.trafficAccessToken}x` })).status, 401, 'a changed token')
        // Another sandbox's token does not open this one.
        const other = await Sandbox.create({ metadata: { suite: tag, kind: 'private' }, network: { allowPublicTraffic: false } })
        try {
          const st = (await httpGet(url, { 'e2b-traffic-access-token': other.trafficAccessToken })).status
          assert.ok(st === 401 || st === 403 || st === 404, `another sandbox's token: ${st}`)
        } finally {
          await other.kill()
        }
        assert.equal((await s.getInfo()).network?.allowPublicTraffic, false)
        // Connecting answers a token again, which works as well.
        const again = await Sandbox.connect(s.sandboxId)
        assert.equal(typeof again.trafficAccessToken, 'string')
        const r2 = await httpGet(`http://${again.getHost(8080)}/index.html`, { 'e2b-traffic-access-token': again.trafficAccessToken })
        assert.equal(r2.status, 200, r2.body)
        assert.equal(r2.body, page)
      } finally {
        await s.kill()
      }
    })

    test('lifecycle.autoResume: a request to a paused sandbox\'s port wakes it', async () => {
      const s = await Sandbox.create({ metadata: { suite: tag, kind: 'resume' }, lifecycle: { onTimeout: 'pause', autoResume: true } })
      try {
        const info = await s.getInfo()
        if (info.lifecycle !== undefined) assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
        await serve(s, 8080, 'up\n')
        const url = `http://${s.getHost(8080)}/index.html`
        assert.equal((await httpGetServed(url)).status, 200)
        if (typeof s.pause === 'function') await s.pause()
        else await s.betaPause()
        assert.equal((await s.getInfo()).state, 'paused')
        // The request wakes it. E2B's pause is a suspend here: with CRIU the jail keeps its processes and the
        // server answers the request that woke it; without, nothing listens after the wake (502).
        const r = await httpGet(url)
        assert.equal(r.status, criu ? 200 : 502, r.body)
        if (criu) assert.equal(r.body, 'up\n')
        assert.equal((await s.getInfo()).state, 'running')
        await serve(s, 8080, 'again\n')
        const r2 = await httpGetServed(url)
        assert.equal(r2.status, 200, r2.body)
        assert.equal(r2.body, 'again\n')
      } finally {
        await s.kill()
      }
    })

    test('a wrong API key is an AuthenticationError', async () => {
      await assert.rejects(Sandbox.create({ apiKey: 'spk_key_wrong_wrongwrongwrong' }), (err) => err instanceof AuthenticationError)
      await assert.rejects(Sandbox.list({ apiKey: 'spk_key_wrong_wrongwrongwrong' }).nextItems(), (err) => err instanceof AuthenticationError)
    })

    test('a wrong access token is refused', async () => {
      const other = await Sandbox.create({ metadata: { suite: tag, kind: 'token' } })
      try {
        const stat = (token) =>
          fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/Stat`, {
            method: 'POST',
            headers: {
              'Content-Type': 'application/json',
              'Connect-Protocol-Version': '1',
              'E2b-Sandbox-Id': other.sandboxId,
              ...(token ? { 'X-Access-Token': token } : {}),
            },
            body: JSON.stringify({ path: '/' }),
          })
        assert.equal((await stat(other.envdAccessToken)).status, 200, "the sandbox's own token works")
        for (const token of [sbx.envdAccessToken, 'e2b1.AAAA', undefined]) {
          const res = await stat(token)
          assert.equal(res.status, 401, `token ${token}`)
          assert.equal((await res.json()).code, 'unauthenticated')
        }
      } finally {
        await other.kill()
      }
    })
  })
}

// The wrapper's own routes, once: health, readiness (it reaches the public API) and its metrics.
describe('space-e2b: /healthz, /readyz, /health and /metrics', () => {
  const get = (path, headers = {}) => fetch(`${process.env.E2B_API_URL}${path}`, { headers })

  test('liveness, readiness and a probe of envd without a sandbox', async () => {
    const z = await get('/healthz')
    assert.equal(z.status, 200)
    assert.deepEqual(await z.json(), { status: 'ok' })
    const r = await get('/readyz')
    assert.equal(r.status, 200)
    assert.deepEqual(await r.json(), { status: 'ok', checks: { api: 'ok' } })
    assert.equal((await get('/health')).status, 204)
    // A token that does not open: no answer about the sandbox.
    const bad = await get('/health', { 'E2b-Sandbox-Id': 'sbx_nothing', 'X-Access-Token': 'e2b1.AAAA' })
    assert.equal(bad.status, 401)
  })

  test('metrics: requests by route and status, calls and upstream calls', async () => {
    const res = await get('/metrics')
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type'), /^text\/plain/)
    const text = await res.text()
    const value = (line) => {
      const m = text.match(new RegExp(`^${line.replace(/[{}"/.?]/g, '\\$&')} (\\d+)$`, 'm'))
      return m ? Number(m[1]) : -1
    }
    // The SDK suites above created sandboxes (2.51.0 with /v2) and ran commands.
    assert.ok(value('space_e2b_requests_total{method="POST",route="/v2/sandboxes",status="201"}') > 0, text)
    assert.ok(value('space_e2b_requests_total{method="POST",route="/sandboxes",status="201"}') > 0, text)
    assert.ok(value('space_e2b_requests_total{method="POST",route="/process.Process/Start",status="200"}') > 0, text)
    assert.ok(value('space_e2b_requests_total{method="GET",route="/health",status="502"}') > 0, text)
    assert.ok(value('space_e2b_requests_total{method="GET",route="/readyz",status="200"}') > 0, text)
    assert.ok(value('space_e2b_upstream_requests_total{upstream="api"}') > 0, text)
    assert.ok(value('space_e2b_upstream_requests_total{upstream="dataplane"}') > 0, text)
    assert.equal(value('space_e2b_upstream_errors_total{upstream="api",reason="unreachable"}'), 0, text)
    assert.ok(value('space_e2b_calls') >= 0 && value('space_e2b_watchers') >= 0, text)
  })
})

// The E2B CLI (@e2b/cli, pinned in package.json), unmodified: `e2b sandbox logs` and
// `e2b template list` against the wrapper.
describe('e2b CLI: sandbox logs and template list', () => {
  const require = createRequire(import.meta.url)
  const cli = join(dirname(require.resolve('@e2b/cli/package.json')), 'dist', 'index.js')
  const home = mkdtempSync(join(tmpdir(), 'e2b-cli-home-'))
  // Its config and update check live under HOME; stdout is not a terminal, so it checks nothing.
  const e2b = (...args) =>
    new Promise((resolve) => {
      execFile(
        process.execPath,
        [cli, ...args],
        {
          env: { PATH: process.env.PATH, HOME: home, E2B_API_URL: process.env.E2B_API_URL, E2B_API_KEY: process.env.E2B_API_KEY },
          timeout: 60_000,
        },
        (err, stdout, stderr) => resolve({ code: err ? err.code ?? 1 : 0, stdout, stderr }),
      )
    })
  let Sandbox

  before(async () => {
    ;({ Sandbox } = await import('e2b-latest'))
  })
  after(() => rmSync(home, { recursive: true, force: true }))

  test('e2b sandbox logs: lifecycle and process events', async () => {
    const s = await Sandbox.create({ metadata: { kind: 'cli-logs' } })
    try {
      await s.commands.run('echo hi')
      await assert.rejects(s.commands.run('exit 7'))
      await s.pause()
      const r = await e2b('sandbox', 'logs', s.sandboxId, '--format', 'json')
      assert.equal(r.code, 0, r.stderr)
      const lines = r.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
      const events = lines.map((l) => `${l.level} ${l.message}${l.exitCode !== undefined ? ` ${l.exitCode}` : ''}`)
      assert.deepEqual(events, [
        'info sandbox created',
        'info process started',
        'info process exited 0',
        'info process started',
        'warn process exited 7',
        'info sandbox suspended',
      ])
      assert.equal(lines[1].cmd, '/bin/bash -l -c echo hi')
      assert.equal(lines[0].template, 'base')
      const times = lines.map((l) => Date.parse(l.timestamp))
      assert.deepEqual([...times].sort((a, b) => a - b), times, 'oldest first')
      // --level filters, as on E2B.
      const warn = await e2b('sandbox', 'logs', s.sandboxId, '--format', 'json', '--level', 'WARN')
      assert.deepEqual(warn.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l).message), ['process exited'])
      // The wire: start (ms) and limit.
      const wire = (q) => fetch(`${process.env.E2B_API_URL}/sandboxes/${s.sandboxId}/logs${q}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
      const two = await (await wire('?limit=2')).json()
      assert.equal(two.logs.length, 2)
      assert.equal(two.logEntries.length, 2)
      assert.equal(two.logEntries[0].message, 'sandbox created')
      assert.equal(two.logEntries[0].fields.template, 'base')
      const after = await (await wire(`?start=${times[5]}`)).json()
      assert.deepEqual(after.logEntries.map((e) => e.message), ['sandbox suspended'])
      assert.equal((await wire('?start=soon')).status, 400)
    } finally {
      await s.kill()
    }
    const gone = await e2b('sandbox', 'logs', s.sandboxId)
    assert.notEqual(gone.code, 0, 'a killed sandbox has no logs here')
  })

  test('e2b template list: the templates the key may use', async () => {
    const r = await e2b('template', 'list', '--format', 'json')
    assert.equal(r.code, 0, r.stderr)
    const list = JSON.parse(r.stdout)
    const base = list.find((t) => t.templateID === 'base')
    assert.ok(base, r.stdout)
    assert.equal(base.public, true)
    assert.deepEqual(base.aliases, ['base'])
    assert.equal(base.buildStatus, 'ready')
    assert.equal(base.envdVersion, '0.5.7')
    const pretty = await e2b('template', 'list')
    assert.equal(pretty.code, 0, pretty.stderr)
    assert.match(pretty.stdout, /Public\s+base\s+base/)
  })
})
