// A SPACE cluster from the rendered Kind manifests, run under runc on this host: the images
// deploy/images/build made, started with the command lines, environment, users, security
// contexts and mounts the manifests give their containers, as a kubelet would.
//
// Runs inside a network namespace of its own (tests/deploy/images starts it there), which
// stands for the cluster network: every Service name resolves to its loopback (/etc/hosts),
// so ports cannot clash with anything else on the host. What stands in for Kubernetes:
//   - a fake API server (HTTPS on 127.0.0.1:6443) holding Secrets and ConfigMaps, which
//     allows each service account exactly what the rendered Roles bound to it allow, and
//     holds from the start the one Secret space-join-tokens of earlier versions (an upgrade),
//     which nothing may read or change;
//   - PostgreSQL with the user, password and database the rendered space-database Secret names;
//   - the kubelet's part: Secrets, ConfigMaps and emptyDirs as directories (modes and fsGroup
//     as the kubelet sets them), the service-account token, the downward API, $(VAR).
// Then: the bootstrap Job (keys, init, publish), the control plane, the data plane, the
// worker (privileged, node paths under the work directory), space-e2b; each readiness probe
// must answer 200; the join-token CronJob replaces the tokens in their two Secrets and revokes
// the old ones (those of an earlier version too), converges when a run fails between the two
// writes, and makes no token when a Secret is missing; a sandbox runs a command through the
// data plane; the worker's hooks drain it and undo that (never an operator's cordon). One
// replica of each (a replica's ports are fixed, and the pods share a network).
//
// Changed from the manifests, so that the test can run beside other clusters on one host:
// the worker's --cgroup-parent (unique per run). Everything is removed at the end, also on
// failure (tests/deploy/images also cleans what a crash of this script leaves).
//
// Usage: node cluster.mjs --render FILE --images DIR --tag TAG --bin DIR --work DIR --netns NAME --pgbin DIR --cgroup NAME
//   --cgroup  the worker's cgroup parent (and the containers' cgroups' prefix)
import { readFileSync, writeFileSync, mkdirSync, chmodSync, chownSync, openSync, closeSync, existsSync, rmSync } from "node:fs";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { createServer } from "node:https";
import { get as httpGet } from "node:http";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const opts = {};
for (let i = 2; i < process.argv.length; i += 2) opts[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
for (const k of ["render", "images", "tag", "bin", "work", "netns", "pgbin", "cgroup"]) if (!opts[k]) throw new Error(`cluster: --${k} is required`);
const W = opts.work;
const runcRoot = join(W, "runc");
const log = (...a) => console.log("cluster:", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const objects = parseAllDocuments(readFileSync(opts.render, "utf8")).map((d) => d.toJS()).filter(Boolean);
const find = (kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const NS = find("Namespace", "space") ? "space" : objects.find((o) => o.metadata.namespace)?.metadata.namespace;
const started = []; // runc container ids to remove
const cgroupParent = opts.cgroup;

// ---- the fake Kubernetes API ----

const store = { secrets: new Map(), configmaps: new Map() };
let resourceVersion = 0;
for (const o of objects) if (o.kind === "Secret") store.secrets.set(o.metadata.name, { ...o, metadata: { ...o.metadata, resourceVersion: String(++resourceVersion) } });
// What an earlier version left: both roles' tokens in one Secret. The script must ignore it
// (the Roles grant nothing on it), and it stays as it is until the operator deletes it.
const b64 = (t) => Buffer.from(t).toString("base64");
const oldJoinSecret = { apiVersion: "v1", kind: "Secret", type: "Opaque",
  metadata: { name: "space-join-tokens", namespace: "space", resourceVersion: String(++resourceVersion) },
  data: { worker: b64("spj_earlier_worker"), dataplane: b64("spj_earlier_dataplane") } };
store.secrets.set("space-join-tokens", structuredClone(oldJoinSecret));
// Faults to answer instead of doing a call, each once: {method, name, code}.
const faults = [];
// Each service account's token (made when a pod first mounts it); a call may do what the
// Roles bound to its account allow.
const saTokens = new Map(); // token -> service account
function tokenOf(sa) {
  for (const [t, n] of saTokens) if (n === sa) return t;
  const t = execFileSync("openssl", ["rand", "-hex", "24"], { encoding: "utf8" }).trim();
  saTokens.set(t, sa);
  return t;
}
const rolesOf = (sa) =>
  objects
    .filter((o) => o.kind === "RoleBinding" && (o.subjects || []).some((s) => s.kind === "ServiceAccount" && s.name === sa))
    .map((b) => find("Role", b.roleRef.name))
    .filter(Boolean);
for (const sa of ["space-bootstrap", "space-join-tokens"]) if (!rolesOf(sa).length) throw new Error(`no Role bound to ${sa}`);
const allowed = (sa, verb, resource, name) =>
  rolesOf(sa).some((role) =>
    role.rules.some((r) => r.resources.includes(resource) && r.verbs.includes(verb) && (!r.resourceNames || (name && r.resourceNames.includes(name))))
  );
const apiLog = [];

function startApi() {
  const dir = join(W, "api");
  mkdirSync(dir, { recursive: true });
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
    "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1,DNS:kubernetes.default.svc",
    "-keyout", join(dir, "key.pem"), "-out", join(dir, "ca.crt")], { stdio: "ignore" });
  const server = createServer({ key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "ca.crt")) }, (req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      // The API server answers compact JSON.
      const answer = (code, obj) => {
        res.writeHead(code, { "Content-Type": "application/json" });
        res.end(JSON.stringify(obj));
      };
      const m = req.url.match(/^\/api\/v1\/namespaces\/([^/]+)\/(secrets|configmaps)(?:\/([^/?]+))?$/);
      const sa = saTokens.get((req.headers.authorization || "").replace(/^Bearer /, ""));
      if (!sa) return answer(401, { kind: "Status", code: 401 });
      if (!m || m[1] !== NS) return answer(404, { kind: "Status", code: 404 });
      const [, , resource, name] = m;
      const verb = { GET: "get", POST: "create", PUT: "update", PATCH: "patch", DELETE: "delete" }[req.method];
      const ok = verb && allowed(sa, verb, resource, name);
      apiLog.push({ sa, call: `${req.method} ${resource}/${name || ""}`, ok });
      if (!ok) return answer(403, { kind: "Status", code: 403, message: `${verb} ${resource} ${name || ""} is forbidden` });
      const fault = faults.findIndex((f) => f.method === req.method && f.name === name);
      if (fault >= 0) {
        const { code } = faults.splice(fault, 1)[0];
        return answer(code, { kind: "Status", code, message: "a fault the test asked for" });
      }
      const objs = store[resource];
      if (req.method === "GET") return objs.has(name) ? answer(200, objs.get(name)) : answer(404, { kind: "Status", code: 404 });
      let obj;
      try {
        obj = JSON.parse(body);
      } catch {
        return answer(400, { kind: "Status", code: 400, message: "not JSON" });
      }
      if (req.method === "POST") {
        if (objs.has(obj.metadata.name)) return answer(409, { kind: "Status", code: 409 });
        obj.metadata.resourceVersion = String(++resourceVersion);
        objs.set(obj.metadata.name, obj);
        return answer(201, obj);
      }
      if (!objs.has(name)) return answer(404, { kind: "Status", code: 404 });
      // An update that names a version succeeds only at that version (optimistic concurrency).
      const v = obj.metadata?.resourceVersion;
      if (v !== undefined && v !== objs.get(name).metadata.resourceVersion) return answer(409, { kind: "Status", code: 409, reason: "Conflict" });
      obj.metadata.resourceVersion = String(++resourceVersion);
      objs.set(name, obj);
      return answer(200, obj);
    });
  });
  return new Promise((r) => server.listen(6443, "127.0.0.1", () => r(server)));
}

// ---- PostgreSQL, as the space-database Secret says ----

function secretValue(name, key) {
  const s = store.secrets.get(name);
  const v = s?.data?.[key] ?? (s?.stringData?.[key] !== undefined ? Buffer.from(s.stringData[key]).toString("base64") : undefined);
  if (v === undefined) throw new Error(`no ${key} in secret ${name}`);
  return Buffer.from(String(v).replace(/\s+/g, ""), "base64");
}
let pgData;
function startPostgres() {
  const url = secretValue("space-database", "url").toString();
  const kv = Object.fromEntries([...url.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1], m[2]]));
  pgData = join(W, "pg");
  mkdirSync(pgData, { recursive: true });
  execFileSync("chown", ["postgres:postgres", pgData]);
  writeFileSync(join(W, "pgpass"), kv.password);
  execFileSync("chmod", ["0644", join(W, "pgpass")]);
  const asPg = (cmd, args) => execFileSync("runuser", ["-u", "postgres", "--", join(opts.pgbin, cmd), ...args], { stdio: ["ignore", "pipe", "pipe"] });
  asPg("initdb", ["-D", join(pgData, "data"), "-U", kv.user, `--pwfile=${join(W, "pgpass")}`, "--auth-host=scram-sha-256", "--auth-local=trust"]);
  asPg("pg_ctl", ["-D", join(pgData, "data"), "-l", join(pgData, "log"), "-w", "-t", "60", "start",
    "-o", `-c listen_addresses=127.0.0.1 -c port=${kv.port || 5432} -k ${pgData} -c fsync=off`]);
  asPg("createdb", ["-h", pgData, "-p", String(kv.port || 5432), "-U", kv.user, kv.dbname]);
  log(`PostgreSQL on 127.0.0.1:${kv.port || 5432}, database ${kv.dbname}, user ${kv.user} (from secret space-database)`);
}
function stopPostgres() {
  if (pgData && existsSync(join(pgData, "data", "postmaster.pid")))
    spawnSync("runuser", ["-u", "postgres", "--", join(opts.pgbin, "pg_ctl"), "-D", join(pgData, "data"), "-m", "immediate", "-w", "stop"], { stdio: "ignore" });
}

// ---- the kubelet's part ----

const CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
  "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
  "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
  "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
  "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON",
  "CAP_BPF", "CAP_CHECKPOINT_RESTORE"];
// A privileged container gets every capability its runtime holds (here: ours; a host may
// withhold some, as this one's CapBnd may say).
const bnd = BigInt(`0x${readFileSync("/proc/self/status", "utf8").match(/^CapBnd:\s*([0-9a-f]+)/m)[1]}`);
const PRIVILEGED_CAPS = CAPS.filter((c, i) => (bnd >> BigInt(i)) & 1n);
// The runtime's default for a container that drops nothing (containerd's).
const DEFAULT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
  "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"];

// The hosts every pod resolves: each Service (short and qualified names) on the loopback.
function hostsFile() {
  const names = ["localhost", "kubernetes", "kubernetes.default.svc"];
  for (const s of objects.filter((o) => o.kind === "Service")) {
    const n = s.metadata.name;
    names.push(n, `${n}.${NS}`, `${n}.${NS}.svc`, `${n}.${NS}.svc.cluster.local`);
  }
  const p = join(W, "hosts");
  writeFileSync(p, `127.0.0.1\t${names.join(" ")}\n`);
  // The cluster DNS's address (nothing answers there: nothing in this test looks a name up).
  writeFileSync(join(W, "resolv.conf"), "nameserver 127.0.0.1\n");
  return p;
}

// Materialises a volume as a directory, as the kubelet would; returns its path.
function volumeDir(pod, podSpec, v) {
  const dir = join(W, "vol", pod, v.name);
  if (existsSync(dir)) return dir;
  mkdirSync(dir, { recursive: true });
  const fsGroup = podSpec.securityContext?.fsGroup;
  const files = (obj, isSecret, mode) => {
    for (const [k, val] of Object.entries(obj?.data || {})) {
      const p = join(dir, k);
      writeFileSync(p, isSecret ? Buffer.from(String(val).replace(/\s+/g, ""), "base64") : String(val));
      // The kubelet's ownership for fsGroup: group fsGroup, group read added.
      chmodSync(p, fsGroup !== undefined ? mode | 0o440 : mode);
      chownSync(p, 0, fsGroup ?? 0);
    }
  };
  if (v.secret) {
    const s = store.secrets.get(v.secret.secretName);
    if (!s && !v.secret.optional) throw new Error(`pod ${pod}: secret ${v.secret.secretName} does not exist (the kubelet would wait)`);
    files(s, true, v.secret.defaultMode ?? 0o644);
  } else if (v.configMap) {
    const c = store.configmaps.get(v.configMap.name);
    if (!c && !v.configMap.optional) throw new Error(`pod ${pod}: configmap ${v.configMap.name} does not exist`);
    files(c, false, v.configMap.defaultMode ?? 0o644);
  } else if (v.emptyDir) {
    chmodSync(dir, 0o777);
    if (fsGroup !== undefined) chownSync(dir, 0, fsGroup);
  } else if (v.hostPath) {
    // The node's paths: under the work directory, but the cgroup tree, which is the host's.
    if (v.hostPath.path === "/sys/fs/cgroup") return "/sys/fs/cgroup";
    const p = join(W, "node", v.hostPath.path);
    mkdirSync(p, { recursive: true });
    return p;
  } else if (v.persistentVolumeClaim) {
    chmodSync(dir, 0o777);
  } else throw new Error(`pod ${pod}: volume ${v.name} of a kind this test does not make`);
  return dir;
}

function fieldRef(pod, path) {
  return { "metadata.name": pod, "metadata.namespace": NS, "spec.nodeName": "node-a", "status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1" }[path];
}

// Writes a runc bundle for container c of a pod; returns its id.
function bundle(pod, podSpec, c, image, extraArgs = []) {
  const id = `${pod}-${c.name}`.slice(0, 60);
  const dir = join(W, "bundles", id);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(W, "bundles"), { recursive: true });
  execFileSync("umoci", ["unpack", "--image", `${join(opts.images, "oci", image)}:${opts.tag}`, dir], { stdio: "ignore" });
  const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  // env: the image's, Kubernetes' service variables, the container's own
  const env = new Map(cfg.process.env.map((e) => e.split(/=(.*)/s).slice(0, 2)));
  env.set("KUBERNETES_SERVICE_HOST", "127.0.0.1");
  env.set("KUBERNETES_SERVICE_PORT", "6443");
  env.set("HOSTNAME", pod);
  for (const e of c.env || []) {
    let v = e.value;
    if (e.valueFrom?.secretKeyRef) v = secretValue(e.valueFrom.secretKeyRef.name, e.valueFrom.secretKeyRef.key).toString();
    else if (e.valueFrom?.fieldRef) v = fieldRef(pod, e.valueFrom.fieldRef.fieldPath);
    else if (e.valueFrom) throw new Error(`${id}: env ${e.name}: a source this test does not resolve`);
    env.set(e.name, (v ?? "").replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n) => env.get(n) ?? m));
  }
  const expand = (s) => s.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, n) => (env.has(n) ? env.get(n) : m));
  const args = [...(c.command || cfg.process.args), ...(c.args || []), ...extraArgs].map(expand);
  cfg.process.args = args;
  cfg.process.env = [...env].map(([k, v]) => `${k}=${v}`);
  cfg.process.terminal = false;
  cfg.hostname = pod;
  const sc = c.securityContext || {};
  const psc = podSpec.securityContext || {};
  const uid = sc.runAsUser ?? psc.runAsUser ?? cfg.process.user.uid;
  const gid = sc.runAsGroup ?? psc.runAsGroup ?? cfg.process.user.gid;
  if ((sc.runAsNonRoot ?? psc.runAsNonRoot) && uid === 0) throw new Error(`${id}: runAsNonRoot, and the user is root`);
  cfg.process.user = { uid, gid, additionalGids: psc.fsGroup !== undefined ? [psc.fsGroup] : [] };
  cfg.root.readonly = !!sc.readOnlyRootFilesystem;
  cfg.process.noNewPrivileges = sc.allowPrivilegeEscalation === false;
  const caps = sc.privileged ? PRIVILEGED_CAPS : sc.capabilities?.drop?.includes("ALL") ? [] : DEFAULT_CAPS;
  cfg.process.capabilities = { bounding: caps, effective: caps, permitted: caps, inheritable: caps, ambient: [] };
  cfg.linux.namespaces = cfg.linux.namespaces.filter((n) => n.type !== "network" && !(podSpec.hostPID && n.type === "pid"));
  cfg.linux.namespaces.push({ type: "network", path: `/run/netns/${opts.netns}` });
  cfg.linux.cgroupsPath = `/${cgroupParent}-pods/${id}`;
  const mounts = cfg.mounts.filter((m) => !(sc.privileged && ["/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup"].includes(m.destination)));
  if (sc.privileged) {
    // All the host's devices and a writable /sys, as a privileged container gets.
    mounts.push({ destination: "/dev", type: "bind", source: "/dev", options: ["rbind", "rw"] });
    mounts.push({ destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "rw"] });
    cfg.linux.maskedPaths = [];
    cfg.linux.readonlyPaths = [];
    delete cfg.linux.resources?.devices;
    cfg.linux.resources = { ...(cfg.linux.resources || {}), devices: [{ allow: true, access: "rwm" }] };
  }
  mounts.push({ destination: "/etc/hosts", type: "bind", source: join(W, "hosts"), options: ["bind", "ro"] });
  mounts.push({ destination: "/etc/resolv.conf", type: "bind", source: join(W, "resolv.conf"), options: ["bind", "ro"] });
  const volumes = new Map((podSpec.volumes || []).map((v) => [v.name, v]));
  for (const vm of c.volumeMounts || []) {
    const v = volumes.get(vm.name);
    if (!v) throw new Error(`${id}: no volume ${vm.name}`);
    const src = volumeDir(pod, podSpec, v);
    const o = ["rbind", vm.readOnly ? "ro" : "rw"];
    if (vm.mountPropagation === "Bidirectional") o.push("rshared");
    mounts.push({ destination: vm.mountPath, type: "bind", source: src, options: o });
  }
  if (podSpec.automountServiceAccountToken !== false && find("ServiceAccount", podSpec.serviceAccountName)?.automountServiceAccountToken !== false) {
    const sa = join(W, "sa", podSpec.serviceAccountName || "default");
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, "token"), tokenOf(podSpec.serviceAccountName || "default"));
    writeFileSync(join(sa, "ca.crt"), readFileSync(join(W, "api", "ca.crt")));
    writeFileSync(join(sa, "namespace"), NS);
    for (const f of ["token", "ca.crt", "namespace"]) chmodSync(join(sa, f), 0o644);
    mounts.push({ destination: "/var/run/secrets/kubernetes.io/serviceaccount", type: "bind", source: sa, options: ["rbind", "ro"] });
  }
  cfg.mounts = mounts;
  // containerd makes the root shared for a container with a Bidirectional mount.
  if ((c.volumeMounts || []).some((m) => m.mountPropagation === "Bidirectional")) cfg.linux.rootfsPropagation = "rshared";
  writeFileSync(join(dir, "config.json"), JSON.stringify(cfg, null, 1));
  return { id, dir, args };
}

function runc(...args) {
  return spawnSync("runc", ["--root", runcRoot, ...args], { encoding: "utf8" });
}
// Runs a container to its end; resolves to its exit code. Output goes to logs/<id>.log.
// Asynchronous: the fake API server in this process must answer meanwhile.
function runToEnd(b, timeoutMs = 300000) {
  mkdirSync(join(W, "logs"), { recursive: true });
  const out = openSync(join(W, "logs", `${b.id}.log`), "a");
  started.push(b.id);
  return new Promise((resolve) => {
    const p = spawn("runc", ["--root", runcRoot, "run", "--bundle", b.dir, b.id], { stdio: ["ignore", out, out] });
    const t = setTimeout(() => runc("kill", b.id, "KILL"), timeoutMs);
    p.on("exit", (code) => {
      clearTimeout(t);
      closeSync(out);
      runc("delete", "-f", b.id);
      resolve(code);
    });
  });
}
function startDetached(b) {
  mkdirSync(join(W, "logs"), { recursive: true });
  const out = openSync(join(W, "logs", `${b.id}.log`), "a");
  started.push(b.id);
  const r = spawnSync("runc", ["--root", runcRoot, "run", "--detach", "--bundle", b.dir, b.id], { stdio: ["ignore", out, out] });
  closeSync(out);
  if (r.status !== 0) throw new Error(`${b.id}: runc run failed (${tail(b.id)})`);
}
const tail = (id, n = 15) => {
  try {
    return readFileSync(join(W, "logs", `${id}.log`), "utf8").trim().split("\n").slice(-n).join("\n    ");
  } catch {
    return "no log";
  }
};
function httpStatus(port, path) {
  return new Promise((r) => {
    const req = httpGet({ host: "127.0.0.1", port, path, timeout: 3000 }, (res) => {
      res.resume();
      r(res.statusCode);
    });
    req.on("error", () => r(0));
    req.on("timeout", () => {
      req.destroy();
      r(0);
    });
  });
}
async function waitProbe(b, c, timeoutS = 120) {
  const p = c.readinessProbe?.httpGet;
  if (!p) throw new Error(`${b.id}: no readiness probe to wait on`);
  const port = typeof p.port === "number" ? p.port : c.ports.find((x) => x.name === p.port).containerPort;
  for (let i = 0; i < timeoutS * 2; i++) {
    const st = runc("state", b.id);
    if (st.status !== 0 || JSON.parse(st.stdout).status !== "running") throw new Error(`${b.id} stopped:\n    ${tail(b.id)}`);
    if ((await httpStatus(port, p.path)) === 200) {
      log(`${b.id}: readiness probe GET ${p.path} on ${port}: 200`);
      return;
    }
    await sleep(500);
  }
  throw new Error(`${b.id}: readiness probe GET ${p.path} on ${port} not 200 within ${timeoutS} s:\n    ${tail(b.id)}`);
}

const podOf = (kind, name) => {
  const o = find(kind, name);
  if (!o) throw new Error(`no ${kind} ${name} in the render`);
  return o.spec.template.spec;
};
const imageOf = (c) => c.image.split("/").pop().split(":")[0];
const spacectl = (key, args, timeout = 120000) =>
  spawnSync(join(opts.bin, "spacectl"), args, { encoding: "utf8", timeout, env: { ...process.env, SPACE_ENDPOINT: "http://127.0.0.1:7070", SPACE_API_KEY: key, SPACE_CONFIG: join(W, "spacectl.json") } });

// ---- the run ----

async function main() {
  mkdirSync(W, { recursive: true });
  hostsFile();
  const api = await startApi();
  try {
    startPostgres();

    // The bootstrap Job: its init containers in order, then its container (which waits for the API).
    const job = podOf("Job", "space-bootstrap");
    for (const c of job.initContainers) {
      const b = bundle("space-bootstrap", job, c, imageOf(c));
      const code = await runToEnd(b);
      if (code !== 0) throw new Error(`bootstrap ${c.name} exited ${code}:\n    ${tail(b.id)}`);
      log(`bootstrap ${c.name}: done (${b.args.join(" ").slice(0, 140)})`);
    }
    for (const s of ["space-admin-key", "space-secrets-key", "space-e2b-secret"])
      if (!store.secrets.has(s)) throw new Error(`bootstrap keys made no secret ${s}`);

    const cpPod = podOf("Deployment", "space-controlplane");
    const cp = bundle("space-controlplane-0", cpPod, cpPod.containers[0], imageOf(cpPod.containers[0]));
    startDetached(cp);

    const publish = bundle("space-bootstrap", job, job.containers[0], imageOf(job.containers[0]));
    const pc = await runToEnd(publish);
    if (pc !== 0) throw new Error(`bootstrap publish exited ${pc}:\n    ${tail(publish.id)}`);
    for (const [kind, name] of [["configmaps", "space-cluster-ca"], ["secrets", "space-join-token-worker"], ["secrets", "space-join-token-dataplane"]])
      if (!store[kind].has(name)) throw new Error(`bootstrap publish made no ${kind} ${name}`);
    const refused = apiLog.filter((c) => !c.ok).map((c) => c.call);
    if (refused.length) throw new Error(`the Role refused the bootstrap: ${refused.join(", ")}`);
    log(`bootstrap publish: done; the API saw ${apiLog.length} calls (${[...new Set(apiLog.map((c) => c.call))].join(", ")}), none refused by the Role`);
    await waitProbe(cp, cpPod.containers[0]);
    const key = secretValue("space-admin-key", "admin.key").toString().trim();
    const tokenList = () => JSON.parse(spacectl(key, ["--json", "worker", "join-token", "ls"]).stdout).join_tokens;
    const entryOf = (list, token) => list.find((t) => token.startsWith(`spj_${t.id}_`));
    const joinPair = () => ["worker", "dataplane"].map((r) => secretValue(`space-join-token-${r}`, "token").toString());

    // The same Job again (kubectl apply after its TTL): keeps every key.
    const before = secretValue("space-admin-key", "admin.key").toString();
    const again = bundle("space-bootstrap-again", job, job.initContainers[0], imageOf(job.initContainers[0]));
    if ((await runToEnd(again)) !== 0 || secretValue("space-admin-key", "admin.key").toString() !== before)
      throw new Error(`bootstrap keys, run again, did not keep the admin key:\n    ${tail(again.id)}`);
    log("bootstrap keys, run again: every secret kept");

    // Its last step again: a ConfigMap holding another CA is an error and stays as it is; the
    // cluster's own is kept, and the join tokens are replaced.
    const caMap = store.configmaps.get("space-cluster-ca");
    const ca = caMap.data["ca.pem"];
    caMap.data["ca.pem"] = ca.replace(/[A-Za-z0-9+/]{16}\n/, "AAAAAAAAAAAAAAAA\n");
    const forged = caMap.data["ca.pem"];
    if (forged === ca) throw new Error("the test could not change the CA certificate");
    const wrongCa = bundle("space-bootstrap", job, job.containers[0], imageOf(job.containers[0]));
    if ((await runToEnd(wrongCa)) === 0 || !/is not this cluster's/.test(tail(wrongCa.id)) || store.configmaps.get("space-cluster-ca").data["ca.pem"] !== forged)
      throw new Error(`bootstrap publish, beside a ConfigMap with another CA, did not stop and keep it:\n    ${tail(wrongCa.id)}`);
    store.configmaps.get("space-cluster-ca").data["ca.pem"] = ca;
    const firstPair = joinPair();
    const rerun = bundle("space-bootstrap", job, job.containers[0], imageOf(job.containers[0]));
    if ((await runToEnd(rerun)) !== 0 || store.configmaps.get("space-cluster-ca").data["ca.pem"] !== ca)
      throw new Error(`bootstrap publish, run again, failed:\n    ${tail(rerun.id)}`);
    const states = firstPair.map((t) => entryOf(tokenList(), t)?.state);
    if (states.some((st) => st !== "revoked")) throw new Error(`after publish ran again, the first pair of join tokens is ${states.join(", ")}`);
    log("bootstrap publish, run again: stops beside another CA, keeps the cluster's own, replaces the join tokens and revokes the first pair");

    const dpPod = podOf("Deployment", "space-dataplane");
    const dp = bundle("space-dataplane-0", dpPod, dpPod.containers[0], imageOf(dpPod.containers[0]));
    startDetached(dp);
    await waitProbe(dp, dpPod.containers[0]);

    const wPod = podOf("DaemonSet", "space-worker");
    const wc = wPod.containers[0];
    const wArgs = (wc.args || []).map((a) => (a.startsWith("--cgroup-parent=") ? `--cgroup-parent=${cgroupParent}` : a));
    const worker = bundle("space-worker-node-a", wPod, { ...wc, args: wArgs }, imageOf(wc));
    writeFileSync(join(W, "worker-purge.json"), JSON.stringify({ pod: wPod, c: { ...wc, args: wArgs } }));
    startDetached(worker);
    await waitProbe(worker, wc, 300);

    const e2bPod = podOf("Deployment", "space-e2b");
    const e2b = bundle("space-e2b-0", e2bPod, e2bPod.containers[0], imageOf(e2bPod.containers[0]));
    startDetached(e2b);
    await waitProbe(e2b, e2bPod.containers[0]);

    // The join-token CronJob, as its own service account, once the worker and the data plane
    // have joined with the bootstrap's tokens: it replaces the Secret with a new pair bound to
    // the roles, revokes the bootstrap's pair and leaves an operator's token alone; the joined
    // components keep working (the sandbox below).
    const newToken = (args) => {
      const r = spacectl(key, ["--json", "worker", "join-token", "create", "--ttl", "1h", ...args]);
      if (r.status !== 0) throw new Error(`spacectl worker join-token create: exit ${r.status}: ${r.stderr}`);
      return JSON.parse(r.stdout).id;
    };
    const opId = newToken(["--description", "an operator's"]);
    // Tokens an earlier version of the script made (then in the one Secret space-join-tokens).
    const earlierIds = [
      newToken(["--role", "worker", "--description", "space-bootstrap: workers, Secret space-join-tokens"]),
      newToken(["--role", "dataplane", "--description", "space-bootstrap: data planes, Secret space-join-tokens"]),
    ];
    const pairBefore = joinPair();
    const cronPod = find("CronJob", "space-join-tokens").spec.jobTemplate.spec.template.spec;
    const runCron = async (what) => {
      const cron = bundle("space-join-tokens", cronPod, cronPod.containers[0], imageOf(cronPod.containers[0]));
      const callsBefore = apiLog.length;
      const code = await runToEnd(cron);
      const calls = apiLog.slice(callsBefore);
      if (calls.some((c) => !c.ok || c.sa !== cronPod.serviceAccountName))
        throw new Error(`the join-token CronJob's calls (${what}): ${calls.map((c) => `${c.sa} ${c.call}${c.ok ? "" : " (refused)"}`).join(", ")}`);
      return { code, calls, out: tail(cron.id) };
    };
    const cron = await runCron("the first run");
    if (cron.code !== 0) throw new Error(`the join-token CronJob exited ${cron.code}:\n    ${cron.out}`);
    const pairAfter = joinPair();
    const list = tokenList();
    for (const [i, role] of ["worker", "dataplane"].entries()) {
      const was = entryOf(list, pairBefore[i]);
      const now = entryOf(list, pairAfter[i]);
      if (!now || now === was || now.state !== "active" || now.role !== role)
        throw new Error(`after the CronJob, the ${role} Secret's token is ${JSON.stringify(now)} (was ${JSON.stringify(was)})`);
      if (was?.state !== "revoked") throw new Error(`the bootstrap's ${role} token is ${was?.state} after the CronJob, not revoked`);
    }
    const opState = list.find((t) => t.id === opId)?.state;
    if (opState !== "active") throw new Error(`the operator's join token is ${opState} after the CronJob`);
    const earlierStates = earlierIds.map((id) => list.find((t) => t.id === id)?.state);
    if (earlierStates.some((st) => st !== "revoked")) throw new Error(`an earlier version's join tokens are ${earlierStates.join(", ")} after the CronJob`);
    log(
      `the join-token CronJob as ${cronPod.serviceAccountName} (${[...new Set(cron.calls.map((c) => c.call))].join(", ")}): ` +
        "a new token in each role's Secret, the bootstrap's and an earlier version's revoked, the operator's token active"
    );

    // A run that fails between its two writes: the workers' Secret is new (its earlier token
    // revoked), the data planes' as it was (its token still active); the next run converges:
    // each Secret holds a new token, and the only active tokens of the script's are those two.
    faults.push({ method: "PUT", name: "space-join-token-dataplane", code: 500 });
    const failed = await runCron("a failed write");
    if (failed.code === 0 || faults.length) throw new Error(`the CronJob, its data planes' write failing, exited ${failed.code}:\n    ${failed.out}`);
    const pairFailed = joinPair();
    const listFailed = tokenList();
    if (pairFailed[0] === pairAfter[0] || entryOf(listFailed, pairFailed[0])?.state !== "active" || entryOf(listFailed, pairAfter[0])?.state !== "revoked")
      throw new Error("after a run that failed writing the data planes' Secret, the workers' Secret is not new, or its earlier token not revoked");
    if (pairFailed[1] !== pairAfter[1] || entryOf(listFailed, pairAfter[1])?.state !== "active")
      throw new Error("after a run that failed writing the data planes' Secret, that Secret or its token changed");
    const recovered = await runCron("a run after a failed one");
    if (recovered.code !== 0) throw new Error(`the CronJob after a failed run exited ${recovered.code}:\n    ${recovered.out}`);
    const pairConverged = joinPair();
    const ours = tokenList().filter((t) => t.state === "active" && t.description?.startsWith("space-bootstrap: "));
    const inSecrets = pairConverged.map((t) => entryOf(ours, t)?.id);
    if (pairConverged.some((t, i) => t === pairFailed[i]) || inSecrets.includes(undefined) || ours.length !== 2)
      throw new Error(`after a run that failed and one that did not, the script's active tokens are ${JSON.stringify(ours)}, the Secrets' ${inSecrets.join(", ")}`);
    log("the CronJob failing between its writes: the workers' Secret new, the data planes' kept; the next run replaced both and left only their tokens active");

    // A Secret gone: the CronJob (which may not create one) stops before it makes a token.
    const dpSecret = store.secrets.get("space-join-token-dataplane");
    store.secrets.delete("space-join-token-dataplane");
    const countBefore = tokenList().length;
    const missing = await runCron("a Secret missing");
    store.secrets.set("space-join-token-dataplane", dpSecret);
    if (missing.code === 0 || !/space-join-token-dataplane does not exist/.test(missing.out) || tokenList().length !== countBefore)
      throw new Error(`the CronJob without the data planes' Secret exited ${missing.code}, and the tokens went from ${countBefore} to ${tokenList().length}:\n    ${missing.out}`);
    log("the CronJob without the data planes' Secret: stopped before it made a token (the bootstrap Job makes the Secrets)");

    // The earlier version's Secret: never asked for, never changed.
    if (apiLog.some((c) => c.call.endsWith("/space-join-tokens")) || JSON.stringify(store.secrets.get("space-join-tokens")) !== JSON.stringify(oldJoinSecret))
      throw new Error("the earlier version's Secret space-join-tokens was asked for or changed");
    log("the earlier version's Secret space-join-tokens: never read, never changed");

    // The worker joined and has the base template: a sandbox runs a command.
    let ran = null;
    for (let i = 0; i < 30 && !ran; i++) {
      const r = spacectl(key, ["run", "base", "--", "sh", "-c", "echo hello from $(hostname) in a sandbox; exit 3"]);
      if (r.status === 3 && /hello from .* in a sandbox/.test(r.stdout)) ran = r;
      else {
        const q = spacectl(key, ["worker", "get", "node-a"]).stdout.match(/quarantine_reason: (.+)/);
        if (i === 29 || (q && q[1].trim() !== "-"))
          throw new Error(`spacectl run: exit ${r.status}: ${r.stdout} ${r.stderr}${q ? `\n  the worker is quarantined: ${q[1]}` : ""}`);
        await sleep(2000);
      }
    }
    log(`spacectl run base: "${ran.stdout.trim()}", exit code ${ran.status} (as the command's)`);
    const wl = spacectl(key, ["--json", "worker", "ls"]);
    if (!wl.stdout.includes('"node-a"')) throw new Error(`worker list does not name node-a: ${wl.stdout}`);
    log("spacectl worker ls: node-a (the node's name, from the downward API)");

    // The worker's hooks run in its image, as the manifest sets them (the Kind overlay turns
    // the drain off), then with the drain on, as the base and EKS have it: the pre-stop hook
    // drains the node (it holds no sandbox now), the post-start hook uncordons it again.
    const hook = (name, env = []) => {
      const cmd = wc.lifecycle?.[name]?.exec?.command;
      if (!cmd) throw new Error(`the worker has no ${name} hook`);
      const r = runc("exec", ...env.flatMap((e) => ["--env", e]), worker.id, ...cmd);
      if (r.status !== 0) throw new Error(`the worker's ${name} hook exited ${r.status}: ${r.stdout} ${r.stderr}`);
    };
    const state = () => (spacectl(key, ["worker", "get", "node-a"]).stdout.match(/^state: (\S+)/m) || [])[1];
    hook("preStop");
    hook("postStart");
    if (state() !== "ready") throw new Error(`after the hooks with the drain off, node-a is ${state()}`);
    log(`the worker's preStop and postStart hooks (SPACE_DRAIN_ON_STOP=${wc.env.find((e) => e.name === "SPACE_DRAIN_ON_STOP")?.value}): node-a stays ready`);
    hook("preStop", ["SPACE_DRAIN_ON_STOP=true"]);
    if (state() !== "drained") throw new Error(`after the pre-stop drain, node-a is ${state()}`);
    hook("postStart", ["SPACE_DRAIN_ON_STOP=true"]);
    if (state() !== "ready") throw new Error(`after the post-start hook, node-a is ${state()}, not ready again`);
    log("with SPACE_DRAIN_ON_STOP=true: the preStop hook drained node-a, the postStart hook made it ready again");
    // An operator's cordon is not the worker's to lift.
    const cordon = spacectl(key, ["worker", "cordon", "node-a"]);
    if (cordon.status !== 0) throw new Error(`spacectl worker cordon: exit ${cordon.status}: ${cordon.stderr}`);
    hook("postStart");
    if (state() !== "cordoned") throw new Error(`after the post-start hook, an operator's cordon is ${state()}`);
    spacectl(key, ["worker", "uncordon", "node-a"]);
    log("the postStart hook left an operator's cordon of node-a in place");
  } finally {
    api.close();
  }
}

async function cleanup() {
  for (const id of started.reverse()) {
    runc("kill", id, "KILL");
    for (let i = 0; i < 20 && runc("state", id).status === 0 && JSON.parse(runc("state", id).stdout || "{}").status === "running"; i++) await sleep(100);
    runc("delete", "-f", id);
  }
  // The worker's own clean-up: sandboxes, cgroups, mounts, loop device (--purge), in its image.
  if (existsSync(join(W, "worker-purge.json"))) {
    const { pod, c } = JSON.parse(readFileSync(join(W, "worker-purge.json"), "utf8"));
    const b = bundle("space-worker-purge", pod, { ...c, lifecycle: undefined }, imageOf(c), ["--purge"]);
    const code = await runToEnd(b, 120000);
    log(`space-worker --purge: exit ${code}`);
  }
  stopPostgres();
}

let failed = false;
for (const sig of ["SIGTERM", "SIGINT"])
  process.on(sig, async () => {
    console.log(`cluster: ${sig}: removing everything`);
    await cleanup();
    process.exit(143);
  });
try {
  await main();
  log("PASS: a cluster from the Kind manifests ran a command in a sandbox");
} catch (e) {
  failed = true;
  console.log(`cluster: FAIL: ${e.message}`);
  for (const id of started) console.log(`--- ${id}\n    ${tail(id, 20)}`);
} finally {
  await cleanup();
}
process.exit(failed ? 1 : 0);
