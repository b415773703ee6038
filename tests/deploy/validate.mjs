// Checks rendered Kubernetes manifests (kubectl kustomize deploy/kind, deploy/eks) offline:
//
// - every object against the Kubernetes schemas (the kubernetes-models package), and every
//   field name against the API's types (the schemas alone let unknown fields through);
// - every container of ours: each --flag in its args and each SPACE_* variable in its env is a
//   setting its binary lists in its own --help; $(VAR) references are defined; other variables
//   are used by the container's command or hooks; a probe's and a port's numbers are ones the
//   daemon listens on; a hook runs only programs its image has, and a daemon's flags in it
//   are settings of its --help, with the container's own values;
// - every Secret, ConfigMap, ServiceAccount, Service (and port) that anything names exists:
//   in the render, made by the bootstrap script (deploy/images/bootstrap.sh), or declared by
//   the overlay as the operator's (the namespace's space.dev/operator-provides annotation);
//   files read from mounted Secrets and ConfigMaps are keys of them; selectors of Services,
//   PDBs and NetworkPolicies select pods;
// - RBAC: each service account's Role grants exactly what the bootstrap script's commands
//   run under it ask of the Kubernetes API (never update on a key Secret or the CA, get only
//   on what it reads back), pods that ask nothing mount no token, and no account is shared by
//   pods that need different grants; no Ingress routes a daemon's /metrics, /healthz or
//   /readyz;
// - Secrets on nodes: a node's kubelet may read every key of every Secret a pod on it names
//   (the Node authorizer grants whole objects; a volume's `items` only picks files), so no pod
//   names a Secret holding another role's join token, and a pod that may run on a sandbox
//   node names no key Secret and no Secret another component names;
// - the database: only pods that use it (name the Secret space-database) may reach its port
//   by a NetworkPolicy, or are admitted to it by one;
// - resources (requests and limits), probes and security contexts are set, and only the
//   worker is privileged.
//
// Usage: node validate.mjs --bin DIR --repo DIR --modules DIR [--self-test] NAME=FILE...
//   --self-test  also breaks copies of the first render in known ways and fails unless each
//                break is reported (the checker's own test).
import { readFileSync, readdirSync, statSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join, basename } from "node:path";
import { parseAllDocuments } from "yaml";

const opts = { renders: [] };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === "--bin" || a === "--repo" || a === "--modules") opts[a.slice(2)] = process.argv[++i];
  else if (a === "--self-test") opts.selfTest = true;
  else if (a.includes("=")) opts.renders.push(a.split(/=(.*)/s).slice(0, 2));
  else throw new Error(`validate: unknown argument ${a}`);
}
for (const k of ["bin", "repo", "modules"]) if (!opts[k]) throw new Error(`validate: --${k} is required`);

// ---- what the binaries accept: their own --help ----

const helpCache = new Map();
function settingsOf(binary) {
  if (helpCache.has(binary)) return helpCache.get(binary);
  const out = execFileSync(join(opts.bin, binary), ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const flags = new Map();
  const env = new Set();
  const defaults = new Map();
  for (const m of out.matchAll(/^ {2}--([a-z0-9-]+)\s+(string|int|bool|duration|size|list)\s[^\n]*\n\s+default: (.*?); env (SPACE_[A-Z0-9_]+)$/gm)) {
    flags.set(m[1], m[2]);
    defaults.set(m[1], m[3]);
    env.add(m[4]);
  }
  if (flags.size === 0) throw new Error(`${binary} --help lists no settings`);
  const prefix = [...env][0].match(/^SPACE_[A-Z0-9]+_/)[0];
  const s = { flags, env, defaults, prefix };
  helpCache.set(binary, s);
  return s;
}
// spacectl: its global options and the variables its help names ("else SPACE_X").
function spacectlEnv() {
  const out = execFileSync(join(opts.bin, "spacectl"), ["--help"], { encoding: "utf8" });
  return new Set([...out.matchAll(/\b(SPACE_[A-Z_]+)\b/g)].map((m) => m[1]));
}

// ---- what the images are: deploy/images/build ----

const buildScript = readFileSync(join(opts.repo, "deploy/images/build"), "utf8");
const imageNames = buildScript.match(/^all=\(([^)]*)\)/m)[1].trim().split(/\s+/);
// Each image's entrypoint: the `echo "USER ENTRYPOINT"` of its case in rootfs().
const entrypoints = new Map();
// And the programs each has in /usr/local/bin (what a hook may run).
const imageBins = new Map();
for (const m of buildScript.matchAll(/^ {8}([a-z0-9]+)\)\n([\s\S]*?)\n {16};;/gm)) {
  const e = m[2].match(/echo "(\S+) (\S+)"/);
  if (e) entrypoints.set(m[1], { user: e[1], entry: e[2] });
  imageBins.set(m[1], new Set([...m[2].matchAll(/\/usr\/local\/bin\/([a-z0-9-]+)"?$/gm)].map((b) => b[1])));
}
for (const n of imageNames) if (!entrypoints.has(n)) throw new Error(`deploy/images/build: no entrypoint found for ${n}`);

// ---- what the bootstrap script makes, and what it asks of the Kubernetes API ----

const bootstrapScript = readFileSync(join(opts.repo, "deploy/images/bootstrap.sh"), "utf8");
// Each object: its kind, its keys, and whether it is made once and kept (secret_keep,
// configmap_keep: create, then get) or replaced (secret_replace: get, then update).
const bootstrapMakes = { secrets: new Map(), configmaps: new Map() };
const bootstrapKept = { secrets: new Set(), configmaps: new Set() };
const bootstrapReplaced = new Set();
for (const m of bootstrapScript.matchAll(/^\s+secret_keep (\S+) (\S+) /gm)) {
  bootstrapMakes.secrets.set(m[1], new Set([m[2]]));
  bootstrapKept.secrets.add(m[1]);
}
const keysIn = (text) => new Set([...text.matchAll(/\\"([A-Za-z0-9._-]+)\\":(?:\\"\$|\$\(json_string)/g)].map((k) => k[1]));
for (const m of bootstrapScript.matchAll(/^\s+configmap_keep (\S+) \S+ (.*)$/gm)) {
  bootstrapMakes.configmaps.set(m[1], keysIn(m[2]));
  bootstrapKept.configmaps.add(m[1]);
}
for (const m of bootstrapScript.matchAll(/^\s+(?:if )?secret_replace (\S+) \S+ (.*)$/gm)) {
  bootstrapMakes.secrets.set(m[1], keysIn(m[2]));
  bootstrapReplaced.add(m[1]);
}
// Which role's join token each replaced Secret holds: its data's $X64 is the token of
// `X=$(new_token ROLE ...)`.
const tokenRoles = new Map(); // Secret -> Set of roles
for (const m of bootstrapScript.matchAll(/^\s+(?:if )?secret_replace (\S+) \S+ (.*)$/gm)) {
  const roles = new Set();
  for (const v of m[2].matchAll(/\$([A-Za-z_]+)64\b/g)) {
    const r = bootstrapScript.match(new RegExp(`^\\s*${v[1]}=\\$\\(new_token (\\S+) `, "m"));
    if (r) roles.add(r[1]);
  }
  if (!roles.size) throw new Error(`bootstrap.sh: found no role for the token in secret/${m[1]}`);
  tokenRoles.set(m[1], roles);
}
// Each command's branch of the script's last `case`, and the Secrets it reads back.
const branchOf = (cmd) => (bootstrapScript.match(new RegExp(`^${cmd}\\)([\\s\\S]*?);;`, "m")) || [])[1] || "";
const readBack = (cmd) => [...branchOf(cmd).matchAll(/^\s+secret_value (\S+) /gm)].map((m) => m[1]);
const bootstrapCommands = new Set([...bootstrapScript.matchAll(/^([a-z]+)\)/gm)].map((m) => m[1]));
if (!bootstrapKept.secrets.size || !bootstrapKept.configmaps.size || !bootstrapReplaced.size || !readBack("keys").length)
  throw new Error("bootstrap.sh: found nothing it makes");
// What each command asks of the Kubernetes API, as "VERB RESOURCE NAME" (NAME * for any:
// RBAC cannot restrict create by name). `tokens` replaces the join tokens' Secrets, which
// it reads first (their versions); `publish` does `tokens` too, and creates those Secrets
// when they do not exist yet (the first bootstrap). The key Secrets are created (a 409 keeps
// one that exists) and only those `keys` reads back are read; the CA's ConfigMap is created
// and read; neither is ever updated.
const tokensNeeds = [...bootstrapReplaced].flatMap((n) => [`get secrets ${n}`, `update secrets ${n}`]);
const bootstrapNeeds = {
  keys: ["create secrets *", ...readBack("keys").map((n) => `get secrets ${n}`)],
  publish: ["create configmaps *", "create secrets *", ...[...bootstrapKept.configmaps].map((n) => `get configmaps ${n}`), ...tokensNeeds],
  tokens: tokensNeeds,
};
for (const c of Object.keys(bootstrapNeeds)) if (!bootstrapCommands.has(c)) throw new Error(`bootstrap.sh: no command ${c}`);

// ---- the API's types, from kubernetes-models' declarations ----

const types = new Map(); // long interface name -> Map(prop -> type text)
function indexTypes(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (name === "node_modules" || name === "_schemas") continue;
    if (statSync(p).isDirectory()) indexTypes(p);
    else if (name.endsWith(".d.ts")) {
      const text = readFileSync(p, "utf8");
      const iface = text.match(/export interface (I\w+)(?: extends \w+)? \{\n([\s\S]*?)\n\}/);
      const alias = text.match(/export type \{ (I\w+) as (I\w+)/);
      if (!iface || !alias || alias[1] !== iface[1]) continue;
      const props = new Map();
      // One property per `    "name"?: TYPE;`, TYPE possibly on several lines ({ [key: string]: ... }).
      const body = iface[2].replace(/\/\*\*[\s\S]*?\*\//g, "");
      let cur = null;
      for (const line of body.split("\n")) {
        const m = line.match(/^ {4}"([^"]+)"\??: (.*)$/);
        if (m) {
          cur = m[1];
          props.set(cur, m[2]);
        } else if (cur && line.trim()) props.set(cur, `${props.get(cur)} ${line.trim()}`);
      }
      for (const [k, v] of props) props.set(k, v.replace(/;\s*$/, "").replace(/\s+/g, " "));
      if (/extends TypeMeta/.test(iface[0])) for (const k of ["apiVersion", "kind"]) props.set(k, "string");
      types.set(alias[2], props);
    }
  }
}
indexTypes(join(opts.modules, "kubernetes-models"));
indexTypes(join(opts.modules, "@kubernetes-models/apimachinery"));

function unknownFields(value, typeName, path, out) {
  const props = types.get(typeName);
  if (!props || value === null || typeof value !== "object") return;
  for (const [k, v] of Object.entries(value)) {
    if (!props.has(k)) {
      out.push(`${path}.${k}: no such field in ${typeName.replace(/^IIoK8s(Api|Apimachinery)/, "")}`);
      continue;
    }
    const t = props.get(k);
    let m;
    if ((m = t.match(/^(IIoK8s\w+)$/))) unknownFields(v, m[1], `${path}.${k}`, out);
    else if ((m = t.match(/^Array<(IIoK8s\w+)>$/)) && Array.isArray(v))
      v.forEach((e, i) => unknownFields(e, m[1], `${path}.${k}[${i}]`, out));
    else if ((m = t.match(/^\{ ?\[key: string\]: (IIoK8s\w+);? ?\}$/)) && v)
      for (const [kk, vv] of Object.entries(v)) unknownFields(vv, m[1], `${path}.${k}.${kk}`, out);
  }
}

async function schemaProblems(obj) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : [null, obj.apiVersion];
  const mod = group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`;
  let cls;
  try {
    cls = (await import(join(opts.modules, mod, "index.js")))[obj.kind];
  } catch {
    cls = undefined;
  }
  if (!cls) return [`${obj.apiVersion} ${obj.kind}: not a Kubernetes type`];
  const out = [];
  // The API server's base64 decoder skips line breaks, which kustomize writes into long values.
  if (obj.kind === "Secret" && obj.data) for (const k of Object.keys(obj.data)) obj.data[k] = String(obj.data[k]).replace(/\s+/g, "");
  try {
    new cls(obj).validate();
  } catch (e) {
    out.push(`schema: ${e.message.split("\n").slice(0, 6).join("; ")}`);
  }
  const long = `IIoK8sApi${group ? group.split(".")[0].replace(/^./, (c) => c.toUpperCase()) : "Core"}${version.replace(/^./, (c) => c.toUpperCase())}${obj.kind}`;
  if (!types.has(long)) out.push(`no declaration of ${long} to check field names against`);
  else unknownFields(obj, long, "", out);
  return out;
}

// ---- the checks ----

function podSpecOf(o) {
  if (["Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"].includes(o.kind)) return o.spec?.template;
  if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template;
  return null;
}
const longRunning = (o) => ["Deployment", "DaemonSet", "StatefulSet"].includes(o.kind);
const selects = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => labels?.[k] === v);
const imageKey = (image) => {
  const m = basename(image.split("@")[0]).split(":")[0].match(/^space-([a-z0-9]+)$/);
  return m ? m[1] : null;
};

async function check(objects) {
  const problems = [];
  const where = (o, c) => `${o.kind}/${o.metadata.name}${c ? ` ${c}` : ""}`;
  const byKind = (k) => objects.filter((o) => o.kind === k);
  const find = (k, n) => objects.find((o) => o.kind === k && o.metadata.name === n);
  const ns = byKind("Namespace")[0];
  const provides = new Set(
    (ns?.metadata?.annotations?.["space.dev/operator-provides"] || "").split(",").map((s) => s.trim()).filter(Boolean)
  );
  for (const p of provides) if (!/^(secret|configmap)\/[a-z0-9-]+$/.test(p)) problems.push(`Namespace: bad operator-provides entry ${p}`);

  // A Secret's or ConfigMap's keys, or null if it exists with unknown keys, or undefined if it does not exist.
  function keysOf(kind, name) {
    const o = find(kind === "secret" ? "Secret" : "ConfigMap", name);
    if (o) return new Set([...Object.keys(o.data || {}), ...Object.keys(o.stringData || {})]);
    const made = bootstrapMakes[kind === "secret" ? "secrets" : "configmaps"].get(name);
    if (made) return made;
    if (provides.has(`${kind}/${name}`)) return null;
    return undefined;
  }

  for (const o of objects) for (const p of await schemaProblems(o)) problems.push(`${where(o)}: ${p}`);

  const pods = objects.map((o) => ({ o, t: podSpecOf(o) })).filter((x) => x.t);
  const podLabels = pods.map(({ o, t }) => ({ o, labels: t.metadata?.labels || {}, t }));
  const services = byKind("Service");
  const svcPort = (host, port) => {
    const name = host.replace(/\.space(\.svc(\.cluster\.local)?)?$/, "");
    const s = services.find((x) => x.metadata.name === name);
    if (!s) return `no Service ${name}`;
    if (!s.spec.ports.some((p) => String(p.port) === String(port))) return `Service ${name} has no port ${port}`;
    return null;
  };
  const cpArgs = pods.flatMap(({ t }) => t.spec.containers).find((c) => imageKey(c.image) === "controlplane")?.args || [];
  const rpcNames = (cpArgs.find((a) => a.startsWith("--rpc-names=")) || "").slice(12).split(",");
  const ctlEnv = spacectlEnv();

  for (const { o, t } of pods) {
    const spec = t.spec;
    if (spec.serviceAccountName && !find("ServiceAccount", spec.serviceAccountName))
      problems.push(`${where(o)}: no ServiceAccount ${spec.serviceAccountName}`);
    const volumes = new Map((spec.volumes || []).map((v) => [v.name, v]));
    for (const vct of o.spec.volumeClaimTemplates || []) volumes.set(vct.metadata.name, { persistentVolumeClaim: {} });
    for (const v of spec.volumes || []) {
      for (const [kind, name, items] of [
        ["secret", v.secret?.secretName, v.secret?.items],
        ["configmap", v.configMap?.name, v.configMap?.items],
      ]) {
        if (!name) continue;
        const keys = keysOf(kind, name);
        const optional = v.secret?.optional || v.configMap?.optional;
        if (keys === undefined && !optional) problems.push(`${where(o)}: volume ${v.name}: no ${kind} ${name}`);
        // The kubelet makes these files root's; a non-root pod reads them through fsGroup.
        const mode = v.secret?.defaultMode ?? v.configMap?.defaultMode ?? 0o644;
        if (spec.securityContext?.runAsNonRoot && !(mode & 0o004) && spec.securityContext?.fsGroup === undefined)
          problems.push(`${where(o)}: volume ${v.name} (mode ${mode.toString(8)}) is unreadable to a non-root pod without fsGroup`);
        for (const it of items || []) if (keys && !keys.has(it.key)) problems.push(`${where(o)}: ${kind} ${name} has no key ${it.key}`);
      }
    }
    const privilegedPod = [...(spec.containers || [])].some((c) => c.securityContext?.privileged);
    if (!privilegedPod && spec.securityContext?.seccompProfile?.type !== "RuntimeDefault")
      problems.push(`${where(o)}: the pod has no RuntimeDefault seccomp profile`);

    for (const [c, init] of [...(spec.initContainers || []).map((c) => [c, true]), ...spec.containers.map((c) => [c, false])]) {
      const w = where(o, `container ${c.name}`);
      // resources
      for (const k of ["requests", "limits"])
        for (const r of ["cpu", "memory"]) if (!c.resources?.[k]?.[r]) problems.push(`${w}: no ${k}.${r}`);
      // security context
      const sc = c.securityContext;
      const key = imageKey(c.image);
      if (!sc) problems.push(`${w}: no securityContext`);
      else if (sc.privileged) {
        if (key !== "worker") problems.push(`${w}: privileged, and only the worker may be`);
      } else {
        if (sc.allowPrivilegeEscalation !== false) problems.push(`${w}: allowPrivilegeEscalation is not false`);
        if (!sc.capabilities?.drop?.includes("ALL")) problems.push(`${w}: capabilities do not drop ALL`);
        if (sc.readOnlyRootFilesystem !== true) problems.push(`${w}: root filesystem not read-only`);
        if (!(sc.runAsNonRoot ?? spec.securityContext?.runAsNonRoot)) problems.push(`${w}: may run as root`);
      }
      // probes
      const ports = c.ports || [];
      const portNumber = (p) => (typeof p === "number" ? p : ports.find((x) => x.name === p)?.containerPort);
      if (longRunning(o) && !init)
        for (const k of ["readinessProbe", "livenessProbe"]) if (!c[k]) problems.push(`${w}: no ${k}`);
      for (const k of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const hg = c[k]?.httpGet;
        if (hg && portNumber(hg.port) === undefined) problems.push(`${w}: ${k} port ${hg.port} is not a port of the container`);
      }
      // images: ours must be built ones
      if (/space-/.test(c.image) && !imageNames.includes(key)) problems.push(`${w}: ${c.image} is not an image deploy/images/build makes`);
      // env: references and $(VAR)
      const envNames = new Set((c.env || []).map((e) => e.name));
      for (const e of c.env || []) {
        const sk = e.valueFrom?.secretKeyRef, ck = e.valueFrom?.configMapKeyRef;
        for (const [kind, ref] of [["secret", sk], ["configmap", ck]]) {
          if (!ref) continue;
          const keys = keysOf(kind, ref.name);
          if (keys === undefined) problems.push(`${w}: env ${e.name}: no ${kind} ${ref.name}`);
          else if (keys && !keys.has(ref.key)) problems.push(`${w}: env ${e.name}: ${kind} ${ref.name} has no key ${ref.key}`);
        }
      }
      const strings = [...(c.command || []), ...(c.args || []), ...(c.env || []).map((e) => e.value).filter(Boolean)];
      for (const s of strings)
        for (const m of s.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
          if (!envNames.has(m[1])) problems.push(`${w}: $(${m[1]}) is not defined in its env`);
      // files in mounted Secrets and ConfigMaps
      const mounts = (c.volumeMounts || []).map((m) => ({ m, v: volumes.get(m.name) }));
      for (const { m, v } of mounts) if (!v) problems.push(`${w}: mounts ${m.name}, which is not a volume`);
      for (const s of strings)
        for (const path of s.matchAll(/(\/[A-Za-z0-9._\/-]+)/g))
          for (const { m, v } of mounts) {
            const name = v?.secret?.secretName || v?.configMap?.name;
            if (!name || !path[1].startsWith(m.mountPath + "/")) continue;
            const keys = keysOf(v.secret ? "secret" : "configmap", name);
            const file = path[1].slice(m.mountPath.length + 1);
            if (keys && !keys.has(file)) problems.push(`${w}: reads ${path[1]}, but ${name} has no key ${file}`);
          }
      // Service addresses
      for (const s of strings)
        for (const m of s.matchAll(/(?:^|[=/@ ,])(space-[a-z0-9-]+(?:\.space(?:\.svc(?:\.cluster\.local)?)?)?):(\d+)/g)) {
          const err = svcPort(m[1], m[2]);
          if (err) problems.push(`${w}: ${m[1]}:${m[2]}: ${err}`);
        }
      for (const a of c.args || []) {
        const m = a.match(/^--control-plane=([^:]+):\d+$/);
        if (m && !rpcNames.includes(m[1])) problems.push(`${w}: dials ${m[1]}, which is not in the control plane's --rpc-names`);
      }
      // flags and settings: ask the binary
      if (!key) continue;
      const entry = entrypoints.get(key);
      const program = c.command ? c.command[0] : entry.entry;
      if (c.command && program === "/usr/local/bin/space-bootstrap") {
        if (!bootstrapCommands.has(c.command[1])) problems.push(`${w}: space-bootstrap has no command ${c.command[1]}`);
      } else if (c.command && !program.startsWith("/usr/local/bin/")) {
        problems.push(`${w}: runs ${program}, which the image does not have`);
      }
      const binary = basename(program);
      const ours = binary.startsWith("space-") && binary !== "space-bootstrap";
      const listens = new Set();
      if (ours) {
        const s = settingsOf(binary);
        for (const a of c.args || []) {
          const m = a.match(/^--([a-z0-9-]+)(?:=(.*))?$/s);
          if (!m) {
            problems.push(`${w}: argument ${a} is not --KEY[=VALUE]`);
            continue;
          }
          let [, k, v] = m;
          let type = s.flags.get(k);
          if (!type && k.startsWith("no-") && s.flags.get(k.slice(3)) === "bool") type = "bool";
          if (!type) problems.push(`${w}: ${binary} has no setting --${k}`);
          else if (v === undefined && type !== "bool") problems.push(`${w}: --${k} needs a value`);
          else if (type === "int" && v !== undefined && !/^-?\d+$/.test(v)) problems.push(`${w}: --${k}=${v} is not an integer`);
          else if (type === "bool" && v !== undefined && !/^(true|false)$/.test(v)) problems.push(`${w}: --${k}=${v} is not a bool`);
          const port = v?.match(/:(\d+)$/);
          if (port && /listen$/.test(k)) listens.add(Number(port[1]));
        }
        // Listeners at their defaults count too.
        for (const [k, d] of s.defaults)
          if (/listen$/.test(k) && !(c.args || []).some((a) => a.startsWith(`--${k}=`)) && /:\d+$/.test(d))
            listens.add(Number(d.match(/:(\d+)$/)[1]));
        for (const p of ports) if (!listens.has(p.containerPort)) problems.push(`${w}: port ${p.name} (${p.containerPort}) is not one ${binary} listens on`);
      }
      // Hooks: each program they run is in the image; a daemon's flags are settings its own
      // --help lists (so a new mode passes once the binary has it) and, where the container's
      // args set the same one, with the same value.
      for (const h of ["preStop", "postStart"]) {
        const text = c.lifecycle?.[h]?.exec?.command?.join(" ");
        if (!text) continue;
        for (const m of text.matchAll(/(?:^|[\s;&|(])(space-[a-z]+|spacectl)\b((?:[ \t]+--[a-z0-9-]+(?:=[^\s;&|)]*)?)*)/g)) {
          const prog = m[1];
          if (!imageBins.get(key)?.has(prog)) {
            problems.push(`${w}: its ${h} hook runs ${prog}, which the image does not have`);
            continue;
          }
          if (prog === "spacectl") continue;
          const hs = settingsOf(prog);
          for (const f of m[2].matchAll(/--([a-z0-9-]+)(?:=(\S*))?/g)) {
            const [, k, v] = f;
            const type = hs.flags.get(k);
            if (!type) problems.push(`${w}: its ${h} hook: ${prog} has no setting --${k}`);
            else if (v === undefined && type !== "bool") problems.push(`${w}: its ${h} hook: --${k} needs a value`);
            // The shell's "$VAR" in a hook is the container's $(VAR) in its args.
            const hv = v?.replace(/"/g, "").replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, "$($1)");
            const own = prog === binary ? (c.args || []).find((a) => a.startsWith(`--${k}=`)) : undefined;
            if (own && hv !== undefined && own !== `--${k}=${hv}`) problems.push(`${w}: its ${h} hook's --${k}=${v} differs from the container's ${own}`);
          }
        }
      }
      const scripts = [...(c.command || []), ...(c.args || []), c.lifecycle?.preStop?.exec?.command?.join(" "), c.lifecycle?.postStart?.exec?.command?.join(" ")]
        .filter(Boolean)
        .join("\n");
      const runsBootstrap = c.command?.[0] === "/usr/local/bin/space-bootstrap";
      for (const e of c.env || []) {
        const n = e.name;
        // SPACE_<COMPONENT>_...: must be a setting of the binary.
        if (ours && n.startsWith(settingsOf(binary).prefix)) {
          if (!settingsOf(binary).env.has(n)) problems.push(`${w}: ${binary} has no setting ${n}`);
          continue;
        }
        // Variables the programs read themselves: TMPDIR by mktemp.
        const readers = { TMPDIR: /\bmktemp\b/ };
        const used =
          (readers[n] && (readers[n].test(scripts) || (runsBootstrap && readers[n].test(bootstrapScript)))) ||
          new RegExp(`\\$\\(${n}\\)|\\$${n}\\b|\\$\\{${n}[}:]`).test(scripts) ||
          (runsBootstrap && new RegExp(`\\b${n}\\b`).test(bootstrapScript)) ||
          (/spacectl/.test(scripts) || runsBootstrap ? ctlEnv.has(n) : false);
        if (!used) problems.push(`${w}: env ${n} is used by nothing in the container`);
      }
    }
  }

  // Services, Ingress, HPA, PDB, NetworkPolicies, RBAC
  for (const s of services) {
    const matched = podLabels.filter((p) => selects(s.spec.selector, p.labels));
    if (!matched.length) problems.push(`${where(s)}: its selector selects no pods`);
    for (const p of s.spec.ports) {
      const ok = matched.some(({ t }) =>
        t.spec.containers.some((c) =>
          (c.ports || []).some((cp) => (typeof p.targetPort === "string" ? cp.name === p.targetPort : cp.containerPort === (p.targetPort ?? p.port)))
        )
      );
      if (!ok) problems.push(`${where(s)}: port ${p.name} targets ${p.targetPort}, which no selected container has`);
    }
  }
  for (const ing of byKind("Ingress"))
    for (const r of ing.spec.rules || [])
      for (const path of r.http?.paths || []) {
        const b = path.backend.service;
        const s = find("Service", b.name);
        if (!s) problems.push(`${where(ing)}: no Service ${b.name}`);
        else if (!s.spec.ports.some((p) => p.name === b.port.name || p.port === b.port.number))
          problems.push(`${where(ing)}: Service ${b.name} has no port ${b.port.name ?? b.port.number}`);
      }
  for (const h of byKind("HorizontalPodAutoscaler")) {
    const t = find(h.spec.scaleTargetRef.kind, h.spec.scaleTargetRef.name);
    if (!t) problems.push(`${where(h)}: no ${h.spec.scaleTargetRef.kind} ${h.spec.scaleTargetRef.name}`);
    else if (t.spec.template.spec.containers.some((c) => !c.resources?.requests?.cpu)) problems.push(`${where(h)}: its target has no CPU requests to scale by`);
  }
  for (const pdb of byKind("PodDisruptionBudget"))
    if (!podLabels.some((p) => selects(pdb.spec.selector.matchLabels, p.labels))) problems.push(`${where(pdb)}: selects no pods`);
  for (const np of byKind("NetworkPolicy")) {
    const sel = np.spec.podSelector?.matchLabels;
    if (sel && Object.keys(sel).length && !podLabels.some((p) => selects(sel, p.labels))) problems.push(`${where(np)}: applies to no pods`);
    for (const rule of [...(np.spec.ingress || []).flatMap((r) => r.from || []), ...(np.spec.egress || []).flatMap((r) => r.to || [])]) {
      if (rule.podSelector && !rule.namespaceSelector && !podLabels.some((p) => selects(rule.podSelector.matchLabels, p.labels)))
        problems.push(`${where(np)}: a peer's podSelector ${JSON.stringify(rule.podSelector.matchLabels)} selects no pods`);
    }
  }
  for (const rb of byKind("RoleBinding")) {
    if (!find(rb.roleRef.kind, rb.roleRef.name)) problems.push(`${where(rb)}: no ${rb.roleRef.kind} ${rb.roleRef.name}`);
    for (const s of rb.subjects || []) if (s.kind === "ServiceAccount" && !find("ServiceAccount", s.name)) problems.push(`${where(rb)}: no ServiceAccount ${s.name}`);
  }
  // Secrets on nodes. The Node authorizer lets a node's kubelet read every Secret a pod bound
  // to it names, whole: a volume's `items` limits the files, not what the node may read. So
  // each role's join token is in a Secret of its own that no pod of another role names, and a
  // pod that may run on a sandbox node (its label or its taint) names no key Secret and no
  // Secret another component names: a sandbox that escapes lands as root on that node.
  const secretsNamed = (spec) =>
    new Set(
      [
        ...(spec.volumes || []).flatMap((v) => [v.secret?.secretName, ...(v.projected?.sources || []).map((p) => p.secret?.name)]),
        ...[...(spec.initContainers || []), ...spec.containers].flatMap((c) => [
          ...(c.env || []).map((e) => e.valueFrom?.secretKeyRef?.name),
          ...(c.envFrom || []).map((e) => e.secretRef?.name),
        ]),
        ...(spec.imagePullSecrets || []).map((s) => s.name),
      ].filter(Boolean)
    );
  const joinRoles = new Set([...tokenRoles.values()].flatMap((r) => [...r]));
  const keySecrets = bootstrapKept.secrets;
  for (const { o, t } of pods) {
    const spec = t.spec;
    const named = secretsNamed(spec);
    const roles = new Set([...(spec.initContainers || []), ...spec.containers].map((c) => imageKey(c.image)).filter((k) => joinRoles.has(k)));
    for (const n of named)
      for (const r of tokenRoles.get(n) || [])
        if (!roles.has(r)) problems.push(`${where(o)}: names the Secret ${n}, which holds the ${r} join token (its node may read all of it, items or not)`);
    const onSandboxNode =
      spec.nodeSelector?.["sandbox.space.dev/node"] !== undefined ||
      (spec.tolerations || []).some((x) => x.key === "sandbox.space.dev/node" || (!x.key && x.operator === "Exists"));
    if (!onSandboxNode) continue;
    for (const n of named) {
      if (keySecrets.has(n)) problems.push(`${where(o)}: runs on sandbox nodes and reads the Secret ${n}`);
      const other = pods.find((p) => p.o !== o && secretsNamed(p.t.spec).has(n));
      if (other) problems.push(`${where(o)}: runs on sandbox nodes and names the Secret ${n}, which ${where(other.o)} names too`);
    }
  }

  // The database's port: reached (egress) and admitted (ingress, where a pod of the render
  // serves it) by NetworkPolicies only for pods that use the database, that is name the
  // Secret space-database.
  const dbPort = 5432;
  const usesDb = (t) => secretsNamed(t.spec).has("space-database");
  const opensPort = (rule, port) => !rule.ports || rule.ports.some((p) => p.port === port || (typeof p.port === "number" && p.endPort >= port && p.port <= port));
  const peerPods = (peers) =>
    !peers?.length
      ? podLabels
      : podLabels.filter(({ labels }) => peers.some((x) => !x.namespaceSelector && !x.ipBlock && x.podSelector && selects(x.podSelector.matchLabels, labels)));
  for (const np of byKind("NetworkPolicy")) {
    const selected = podLabels.filter(({ labels }) => selects(np.spec.podSelector?.matchLabels, labels));
    if ((np.spec.egress || []).some((r) => opensPort(r, dbPort)))
      for (const p of selected) if (!usesDb(p.t)) problems.push(`${where(p.o)}: NetworkPolicy ${np.metadata.name} lets it reach port ${dbPort}, and it uses no database`);
    const servesDb = selected.some((p) => p.t.spec.containers.some((c) => (c.ports || []).some((cp) => cp.containerPort === dbPort)));
    for (const r of (np.spec.ingress || []).filter((r) => opensPort(r, dbPort)))
      if (servesDb)
        for (const p of peerPods(r.from)) if (!usesDb(p.t)) problems.push(`${where(p.o)}: NetworkPolicy ${np.metadata.name} admits it on port ${dbPort}, and it uses no database`);
  }

  // RBAC: each service account may do exactly what the pods running under it ask of the
  // Kubernetes API (bootstrapNeeds, by the space-bootstrap command they run), and pods that
  // ask nothing get no token. An account is not shared by pods that need different grants.
  const needsOf = (t) => {
    const n = new Set();
    for (const c of [...(t.spec.initContainers || []), ...t.spec.containers])
      if (c.command?.[0] === "/usr/local/bin/space-bootstrap") for (const x of bootstrapNeeds[c.command[1]] || []) n.add(x);
    return n;
  };
  const accounts = new Map(); // service account -> [{o, needs}]
  for (const { o, t } of pods) {
    const sa = t.spec.serviceAccountName || "default";
    const needs = needsOf(t);
    const token = t.spec.automountServiceAccountToken ?? find("ServiceAccount", sa)?.automountServiceAccountToken ?? true;
    if (!needs.size && token) problems.push(`${where(o)}: mounts a service-account token, and nothing in it calls the Kubernetes API`);
    if (!accounts.has(sa)) accounts.set(sa, []);
    accounts.get(sa).push({ o, needs });
  }
  const listed = (set) => [...set].sort().join(", ");
  for (const [sa, users] of accounts) {
    for (const u of users.slice(1))
      if (listed(u.needs) !== listed(users[0].needs))
        problems.push(`${where(u.o)}: shares ServiceAccount ${sa} with ${where(users[0].o)}, which needs other grants (${listed(users[0].needs) || "none"})`);
    const needs = new Set(users.flatMap((u) => [...u.needs]));
    const granted = new Set();
    for (const rb of byKind("RoleBinding").filter((b) => (b.subjects || []).some((x) => x.kind === "ServiceAccount" && x.name === sa))) {
      const role = find(rb.roleRef.kind, rb.roleRef.name);
      for (const r of role?.rules || [])
        for (const v of r.verbs)
          for (const res of r.resources)
            for (const n of r.resourceNames || ["*"]) granted.add(`${v} ${res} ${n}`);
    }
    for (const g of granted) if (!needs.has(g)) problems.push(`ServiceAccount ${sa}: its Role grants ${g}, which its pods do not need`);
    for (const n of needs) if (!granted.has(n)) problems.push(`ServiceAccount ${sa}: its Role does not grant ${n}, which bootstrap.sh does`);
  }
  for (const r of byKind("ClusterRoleBinding")) problems.push(`${where(r)}: the manifests need no cluster-wide grant`);

  // An Ingress routes no daemon's /metrics, /healthz or /readyz (for the cluster, not the
  // Internet), but on the data plane's sandbox names (*.INGRESS_DOMAIN), where every request
  // goes to a sandbox's own server.
  const dpc = pods.flatMap(({ t }) => t.spec.containers).find((c) => imageKey(c.image) === "dataplane");
  const dpDomain =
    (dpc?.args || []).find((a) => a.startsWith("--ingress-domain="))?.slice(17) ??
    (dpc?.env || []).find((e) => e.name === "SPACE_DATAPLANE_INGRESS_DOMAIN")?.value;
  const routes = (p, path) => {
    const type = p.pathType;
    if (type === "Exact") return p.path === path;
    const prefix = p.path.replace(/\/+$/, "");
    if (type === "Prefix") return prefix === "" || path === prefix || path.startsWith(`${prefix}/`);
    return path.startsWith(p.path);
  };
  for (const ing of byKind("Ingress"))
    for (const r of ing.spec.rules || [])
      for (const p of r.http?.paths || []) {
        const svc = find("Service", p.backend.service?.name);
        const toDataplane = podLabels.some(({ labels, t }) => selects(svc?.spec.selector, labels) && t.spec.containers.some((c) => imageKey(c.image) === "dataplane"));
        if (toDataplane && dpDomain && r.host === `*.${dpDomain}`) continue;
        for (const ops of ["/metrics", "/healthz", "/readyz"])
          if (routes(p, ops)) problems.push(`${where(ing)}: ${r.host || "any host"} ${p.path} (${p.pathType}) routes ${ops} to ${p.backend.service?.name}`);
      }
  return problems;
}

// ---- self-test: each break must be found ----

const breaks = [
  ["an unknown flag", (objs) => cont(objs, "controlplane").args.push("--no-such-setting=1"), /has no setting --no-such-setting/],
  ["a misspelt setting variable", (objs) => cont(objs, "worker").env.push({ name: "SPACE_WORKER_LABLES", value: "a=b" }), /no setting SPACE_WORKER_LABLES/],
  ["a missing Secret", (objs) => (cont(objs, "controlplane").env.find((e) => e.valueFrom?.secretKeyRef).valueFrom.secretKeyRef.name = "space-databse"), /no secret space-databse/],
  ["a wrong type", (objs) => (objs.find((o) => o.kind === "Deployment").spec.replicas = "two"), /schema: .*replicas/],
  ["an unknown field", (objs) => (cont(objs, "dataplane").imagePullPolicyy = "Always"), /no such field/],
  ["a missing probe", (objs) => delete cont(objs, "dataplane").readinessProbe, /no readinessProbe/],
  ["a Service port nothing serves", (objs) => (objs.find((o) => o.kind === "Service").spec.ports[0].targetPort = "nope"), /no selected container has/],
  ["a file a Secret lacks", (objs) => cont(objs, "worker").args.push("--join-token-file=/etc/space/join/wrker"), /has no key wrker/],
  ["an undefined $(VAR)", (objs) => cont(objs, "dataplane").args.push("--name=$(POD_NAMES)"), /\$\(POD_NAMES\) is not defined/],
  ["a privileged data plane", (objs) => (cont(objs, "dataplane").securityContext = { privileged: true }), /only the worker may be/],
  ["a secret a non-root pod cannot read", (objs) => delete objs.find((o) => o.kind === "CronJob").spec.jobTemplate.spec.template.spec.securityContext.fsGroup, /unreadable to a non-root pod/],
  ["no limits", (objs) => delete cont(objs, "e2b").resources.limits, /no limits\.memory/],
  ["an unknown Service", (objs) => (cont(objs, "e2b").args = cont(objs, "e2b").args.map((a) => a.replace("space-dataplane:", "space-dataplan:"))), /no Service space-dataplan/],
  ["the admin key on a sandbox node", (objs) => podSpecOf(objs.find((o) => o.kind === "DaemonSet")).spec.volumes.push({ name: "k", secret: { secretName: "space-admin-key" } }), /runs on sandbox nodes and reads the Secret space-admin-key/],
  ["the CronJob under the bootstrap Job's account", (objs) => (podSpecOf(objs.find((o) => o.kind === "CronJob")).spec.serviceAccountName = "space-bootstrap"), /shares ServiceAccount space-bootstrap/],
  ["update on a key Secret", (objs) => objs.find((o) => o.kind === "Role" && o.metadata.name === "space-bootstrap").rules.push({ apiGroups: [""], resources: ["secrets"], resourceNames: ["space-secrets-key"], verbs: ["update"] }), /grants update secrets space-secrets-key/],
  ["create for the join-token CronJob", (objs) => objs.find((o) => o.kind === "Role" && o.metadata.name === "space-join-tokens").rules.push({ apiGroups: [""], resources: ["secrets"], verbs: ["create"] }), /space-join-tokens: its Role grants create secrets/],
  ["a token for a pod that needs none", (objs) => (podSpecOf(objs.find((o) => o.kind === "Deployment" && o.metadata.name === "space-e2b")).spec.automountServiceAccountToken = true), /space-e2b: mounts a service-account token/],
  ["/metrics behind an Ingress", (objs) => objs.push({ apiVersion: "networking.k8s.io/v1", kind: "Ingress", metadata: { name: "x" }, spec: { rules: [{ host: "api.example.com", http: { paths: [{ path: "/", pathType: "Prefix", backend: { service: { name: "space-controlplane", port: { name: "api" } } } }] } }] } }), /routes \/metrics to space-controlplane/],
  ["a hook's setting the binary lacks", (objs) => hookAppend(objs, "preStop", "--no-such-mode"), /hook: space-worker has no setting --no-such-mode/],
  ["a hook's state directory not the worker's", (objs) => hookAppend(objs, "postStart", "--state-dir=/var/lib/space/other"), /hook's --state-dir=\/var\/lib\/space\/other differs/],
  ["the data planes' join token named by the worker, with items", (objs) => (podSpecOf(objs.find((o) => o.kind === "DaemonSet")).spec.volumes.find((v) => v.name === "join").secret = { secretName: "space-join-token-dataplane", items: [{ key: "token", path: "token" }] }),
    /DaemonSet\/space-worker: names the Secret space-join-token-dataplane, which holds the dataplane join token/],
  ["a Secret the worker shares with another component", (objs) => podSpecOf(objs.find((o) => o.kind === "DaemonSet")).spec.volumes.push({ name: "db", secret: { secretName: "space-database" } }),
    /DaemonSet\/space-worker: runs on sandbox nodes and names the Secret space-database, which \S+ names too/],
  ["get on a key Secret the bootstrap never reads", (objs) => objs.find((o) => o.kind === "Role" && o.metadata.name === "space-bootstrap").rules.push({ apiGroups: [""], resources: ["secrets"], resourceNames: ["space-secrets-key"], verbs: ["get"] }), /grants get secrets space-secrets-key/],
  ["the database's port open to the join-token CronJob", (objs) => objs.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === "space-join-tokens").spec.egress.push({ to: [{ ipBlock: { cidr: "0.0.0.0/0" } }], ports: [{ protocol: "TCP", port: 5432 }] }),
    /CronJob\/space-join-tokens: NetworkPolicy space-join-tokens lets it reach port 5432/],
  ["Kind's database admitting the join-token CronJob", (objs) => objs.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === "space-postgres").spec.ingress[0].from.push({ podSelector: { matchLabels: { "app.kubernetes.io/part-of": "space" } } }),
    /CronJob\/space-join-tokens: NetworkPolicy space-postgres admits it on port 5432/],
];
// Adds word to the flags of the space-worker command in the worker's hook.
function hookAppend(objs, name, word) {
  const cmd = cont(objs, "worker").lifecycle[name].exec.command;
  cmd[cmd.length - 1] = cmd[cmd.length - 1].replace(/(space-worker(?: --\S+)*)/, `$1 ${word}`);
}
function cont(objs, key) {
  for (const o of objs) {
    const t = podSpecOf(o);
    const c = t?.spec.containers.find((c) => imageKey(c.image) === key);
    if (c) return c;
  }
  throw new Error(`self-test: no ${key} container`);
}

function load(file) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  for (const d of docs) if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
  return docs.map((d) => d.toJS()).filter(Boolean);
}

let failed = false;
for (const [name, file] of opts.renders) {
  const objects = load(file);
  const problems = await check(objects);
  const kinds = {};
  for (const o of objects) kinds[o.kind] = (kinds[o.kind] || 0) + 1;
  console.log(`${name}: ${objects.length} objects (${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(", ")})`);
  for (const p of problems) console.log(`  FAIL ${name}: ${p}`);
  if (problems.length) failed = true;
  else console.log(`  ok: schemas, field names, flags and settings, references, resources, probes, security contexts`);
}
if (opts.selfTest && opts.renders.length) {
  const [name, file] = opts.renders[0];
  for (const [what, mutate, expect] of breaks) {
    const objects = load(file);
    mutate(objects);
    const problems = await check(objects);
    if (problems.some((p) => expect.test(p))) console.log(`  self-test: ${what} is found`);
    else {
      console.log(`  FAIL self-test (${name}): ${what} was not found; problems: ${problems.join(" | ") || "none"}`);
      failed = true;
    }
  }
}
process.exit(failed ? 1 : 0);
