// E2B code on the Debian template, once per pinned SDK version: the cluster
// has built `debian` (scripts/debian-template, run by tests/e2b/run debian),
// so a create that names no template (E2B's `base`) gets it, and what agents
// use at once is there: python3, pip, venv, node, npm, git, curl, sudo, and
// the user `user` in /home/user. Nothing here reaches a network: the sandbox
// has none (the gateway's upstream is a namespace with only loopback).
import { test, describe, before, after } from 'node:test'
import assert from 'node:assert/strict'

const versions = ['e2b-2.20.1', 'e2b-latest']

for (const pkg of versions) {
  const { Sandbox } = await import(pkg)
  const version = (await import(`${pkg}/package.json`, { with: { type: 'json' } })).default.version

  describe(`e2b@${version} on the Debian template`, { concurrency: false }, () => {
    let sbx
    const run = async (cmd, opts = {}) => {
      const r = await sbx.commands.run(cmd, { timeoutMs: 120_000, ...opts })
      assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`)
      return r.stdout
    }

    before(async () => {
      sbx = await Sandbox.create({ timeoutMs: 600_000 })
    })
    after(async () => {
      if (sbx) await sbx.kill()
    })

    test('base is the Debian template', async () => {
      const info = await sbx.getInfo()
      assert.equal(info.templateId, 'debian')
      assert.match(await run('cat /etc/debian_version'), /^12\./)
    })

    test('commands run as user in /home/user, with passwordless sudo', async () => {
      assert.equal(await run('whoami; pwd'), 'user\n/home/user\n')
      assert.equal(await run('id -u; id -g'), '1000\n1000\n')
      assert.equal(await run('sudo -n id -u'), '0\n')
      assert.equal(await run('id -u', { user: 'root' }), '0\n')
    })

    test('python3, pip and venv', async () => {
      assert.equal(await run('python3 -c "import sys, json; print(json.dumps(sys.version_info[:1]))"'), '[3]\n')
      assert.match(await run('pip3 --version'), /^pip \d+/)
      assert.equal(await run('python3 -m venv /tmp/venv && /tmp/venv/bin/python -c "print(6 * 7)"'), '42\n')
    })

    test('node and npm', async () => {
      assert.equal(await run('node -e "console.log([1, 2, 3].map((x) => x * 2).join())"'), '2,4,6\n')
      assert.match(await run('npm --version'), /^\d+\.\d+\.\d+\n$/)
      // npm itself works offline: a package made and packed here
      assert.match(
        await run('export npm_config_update_notifier=false; mkdir -p p && cd p && npm init -y >/dev/null && npm pack --silent 2>/dev/null'),
        /^p-1\.0\.0\.tgz\n$/,
      )
    })

    test('git and curl', async () => {
      assert.equal(
        await run(
          'git init -q r && cd r && echo hi > a && git add a && ' +
            'git -c user.name=agent -c user.email=agent@example.org commit -qm first && git log --format=%s',
        ),
        'first\n',
      )
      assert.match(await run('curl --version'), /^curl \d+/)
      // file:// needs no network
      await sbx.files.write('hello.txt', 'from the SDK\n')
      assert.equal(await run('curl -s file:///home/user/hello.txt'), 'from the SDK\n')
    })

    test("files are the user's, relative to the user's home", async () => {
      await sbx.files.write('notes/todo.md', '- [ ] ship\n')
      assert.equal(await run('stat -c "%U %G" /home/user/notes/todo.md /home/user/notes'), 'user user\nuser user\n')
      assert.equal(await sbx.files.read('/home/user/notes/todo.md'), '- [ ] ship\n')
    })
  })
}
