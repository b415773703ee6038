// Plain HTTP to the sandboxes' hosts of a direct-mode cluster, for the suites beside this file.
import http from 'node:http'

// *.localhost is loopback (RFC 6761), but Node resolves names with the system's
// resolver, and glibc without nss-myhostname does not know *.localhost: resolve
// it here, to 127.0.0.1, and refuse every other name (nothing leaves the host).
export const loopback = (host, opts, cb) => {
  if (typeof opts === 'function') [cb, opts] = [opts, {}]
  if (!/(^|\.)localhost\.?$/i.test(host)) {
    return cb(Object.assign(new Error(`not resolving ${host}: only *.localhost`), { code: 'ENOTFOUND' }))
  }
  if (opts.all) cb(null, [{ address: '127.0.0.1', family: 4 }])
  else cb(null, '127.0.0.1', 4)
}

// GET url (plain HTTP, as the data plane of a direct-mode cluster serves): status and body.
// A wake (autoResume) holds the answer until the sandbox runs: timeoutMs allows for it.
export const httpGet = (url, headers = {}, timeoutMs = 30_000) =>
  new Promise((resolve, reject) => {
    const req = http.get(url, { headers, lookup: loopback }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`GET ${url}: no answer in ${timeoutMs / 1000} s`)))
  })

// GET url until something listens behind it (the data plane answers 502 until then), tries times 0.1 s apart.
export const httpGetServed = async (url, headers = {}, tries = 100) => {
  let r
  for (let i = 0; i < tries; i++) {
    r = await httpGet(url, headers)
    if (r.status !== 502) return r
    await new Promise((res) => setTimeout(res, 100))
  }
  return r
}
