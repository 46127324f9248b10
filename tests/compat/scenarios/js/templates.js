'use strict'
// Template builds through the SDK: every builder step kind, the start/ready commands, the layer
// cache on a rebuild with one changed step, tags, aliases, background builds and failures.
// Argument: the template name (shared by every client of one server: later builds are cached).

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { Sandbox, Template, waitForPort } = require('e2b')
const { attempt, commandResult, run } = require('./_common')

const RUN_NONCE = require('node:crypto').randomBytes(6).toString('hex')

const PROBE = [
  'whoami; pwd; echo $SCENARIO_ENV; cat /tmp/whoami-build /etc/scenario-root',
  "stat -c '%U %a' /opt/files/data.txt; readlink /opt/files/link.txt; cat /opt/single.txt",
  'command -v sgtree; test -d /home/user/clone/.git && echo cloned; test -d /opt/made && echo made',
  'readlink /opt/single-link; test -e /opt/gone || echo gone; cat /opt/new',
  'curl -s localhost:8123/marker.txt',
].join('; ')

// A local apt repository with one package of our own (sgtree), in place of Debian's sources:
// aptInstall then reaches no network.
const LOCAL_APT_REPO = [
  "set -e; d=/opt/sgrepo; mkdir -p $d/pkg/DEBIAN $d/pkg/usr/bin; ",
  "printf 'Package: sgtree\\nVersion: 1.0\\nArchitecture: all\\n",
  "Maintainer: s <s@g>\\nDescription: apt_install probe\\n' > $d/pkg/DEBIAN/control; ",
  "printf '#!/bin/sh\\necho apt-ok\\n' > $d/pkg/usr/bin/sgtree; ",
  "chmod 755 $d/pkg/usr/bin/sgtree; dpkg-deb -b $d/pkg $d/sgtree.deb >/dev/null; ",
  "cd $d; { dpkg-deb -f sgtree.deb; echo Filename: ./sgtree.deb; ",
  "echo Size: $(stat -c %s sgtree.deb); ",
  "echo SHA256: $(sha256sum sgtree.deb | cut -d' ' -f1); } > Packages; ",
  "mkdir -p $d/off; ",
  "mv /etc/apt/sources.list.d/* /etc/apt/sources.list $d/off/ 2>/dev/null || true; ",
  "echo 'deb [trusted=yes] file:/opt/sgrepo ./' > /etc/apt/sources.list.d/sgrepo.list",
].join('')

function makeContext() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sg-tpl-'))
  fs.mkdirSync(path.join(root, 'files'))
  fs.writeFileSync(path.join(root, 'files', 'data.txt'), 'data-ok\n')
  fs.symlinkSync('data.txt', path.join(root, 'files', 'link.txt'))
  fs.writeFileSync(path.join(root, 'single.txt'), 'single-ok\n')
  return root
}

function template(context, version) {
  return Template({ fileContextPath: context })
    .fromTemplate('base')
    .setEnvs({ SCENARIO_ENV: 'env-ok' })
    .runCmd('echo step-as-$(whoami) > /tmp/whoami-build')
    .runCmd('echo root-ok > /etc/scenario-root', { user: 'root' })
    .copy('files', '/opt/files', { user: 'user', mode: 0o750 })
    .copy('single.txt', '/opt/single.txt')
    .runCmd(LOCAL_APT_REPO, { user: 'root' })
    .aptInstall('sgtree')
    .runCmd(
      'git init -q /tmp/src && git -C /tmp/src -c user.email=s@g -c user.name=s ' +
        'commit -q --allow-empty -m init'
    )
    .gitClone('/tmp/src', '/home/user/clone')
    .makeDir('/opt/made', { user: 'root' })
    .makeSymlink('/opt/single.txt', '/opt/single-link', { user: 'root' })
    .runCmd('touch /opt/gone && echo renamed-ok > /opt/old', { user: 'root' })
    .remove('/opt/gone', { user: 'root' })
    .rename('/opt/old', '/opt/new', { user: 'root' })
    // The comment makes this step's cache key unique to this run: the layer cache is the
    // engine's, shared by every server of a test session.
    .runCmd(`mkdir -p /srv/www && echo ${version} > /srv/www/marker.txt # ${RUN_NONCE}`, {
      user: 'root',
    })
    .setUser('builder')
    .setWorkdir('/opt/work')
    .setStartCmd('cd /srv/www && python3 -m http.server 8123', waitForPort(8123))
}

async function build(tpl, name) {
  const logs = []
  const info = await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e.message) })
  return { info, logs }
}

async function withSandbox(ref, command) {
  const sbx = await Sandbox.create(ref)
  try {
    return commandResult(await sbx.commands.run(command))
  } finally {
    await sbx.kill()
  }
}

async function scenario([name]) {
  const out = { name }
  const context = makeContext()
  const started = Date.now()
  const { info, logs } = await build(template(context, 'v1'), name)
  out.build_seconds = (Date.now() - started) / 1000
  out.template_id = info.templateId
  out.logs_tail = logs.slice(-40)
  out.probe = await withSandbox(name, PROBE)

  const second = await build(template(context, 'v2'), name)
  out.rebuild_cached = second.logs.filter((line) => line.startsWith('CACHED'))
  out.rebuild_ran = second.logs.filter((line) => line.startsWith('[') && line.includes('/'))
  out.marker_after_rebuild = await withSandbox(`${name}:default`, 'cat /srv/www/marker.txt')

  out.exists = await Template.exists(name)
  out.exists_base = await Template.exists('base')
  out.exists_missing = await Template.exists(`${name}-missing`)
  out.assign = await attempt(async () => {
    const assigned = await Template.assignTags(`${name}:default`, ['stable'])
    return { build_id: assigned.buildId, tags: assigned.tags }
  })
  out.tags = (await Template.getTags(info.templateId)).map((t) => t.tag).sort()
  out.tagged_marker = await withSandbox(`${name}:stable`, 'cat /srv/www/marker.txt')
  out.remove_tags = await attempt(() => Template.removeTags(name, ['stable']))
  out.tags_after_remove = (await Template.getTags(info.templateId)).map((t) => t.tag).sort()

  const background = await Template.buildInBackground(
    Template().fromTemplate(name).runCmd('echo background > /tmp/bg'),
    `${name}-bg`
  )
  let status = 'building'
  for (let i = 0; i < 600 && status !== 'ready' && status !== 'error'; i++) {
    status = (await Template.getBuildStatus(background)).status
    if (status !== 'ready' && status !== 'error') await new Promise((r) => setTimeout(r, 200))
  }
  out.background_final = status

  const failing = Template().fromTemplate('base').runCmd('echo boom-tail-line; exit 3')
  out.failed = await attempt(() => build(failing, `${name}-fail`))
  const missing = Template().fromImage('sandgate-missing.invalid/nothing:1')
  out.missing_image = await attempt(() => build(missing, `${name}-noimage`))
  return out
}

run(scenario)
