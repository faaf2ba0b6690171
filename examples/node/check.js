#!/usr/bin/env node
// Ask Throttle whether a request may go ahead (Node 18+, no dependencies).
//
//   THROTTLE_URL=http://localhost:8080 node examples/node/check.js --count 5 --limit 3
//
// Uses THROTTLE_API_KEY when set; otherwise registers a client of its own (a
// name and email unique to the run, so it runs again on the same server) and
// prints its key (shown once: keep it). Prints one line per check:
//
//   check 1: allowed remaining=2 limit=3 reset_at=1767225600
//   check 4: rejected retry_after=42 limit=3 reset_at=1767225600
'use strict';

const { parseArgs } = require('node:util');

const { values: args } = parseArgs({
  options: {
    url: { type: 'string', default: process.env.THROTTLE_URL || 'http://localhost:8080' },
    identifier: { type: 'string', default: 'user_123' },
    limit: { type: 'string', default: '10' },
    window: { type: 'string', default: '60' },
    algorithm: { type: 'string', default: 'sliding_window' },
    count: { type: 'string', default: '1' },
  },
});

// POST body as JSON; resolve to [status, reply]. Error statuses are replies too.
async function call(path, body, apiKey) {
  const headers = { 'Content-Type': 'application/json' };
  if (apiKey) headers['X-API-Key'] = apiKey;
  const resp = await fetch(args.url.replace(/\/+$/, '') + path, {
    method: 'POST',
    headers,
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  let reply;
  try {
    reply = await resp.json();
  } catch {
    reply = { error: resp.statusText };
  }
  return [resp.status, reply];
}

function fail(msg) {
  console.error(msg);
  process.exit(1);
}

async function main() {
  let apiKey = process.env.THROTTLE_API_KEY;
  if (!apiKey) {
    const run = `${Math.floor(Date.now() / 1000)}-${process.pid}`;
    const [status, reply] = await call('/register', {
      name: `node-example-${run}`,
      email: `node-${run}@example.com`,
      default_algorithm: args.algorithm,
    });
    if (status !== 201 || !reply.api_key) fail(`register: HTTP ${status} ${reply.code || ''}: ${reply.error || JSON.stringify(reply)}`);
    apiKey = reply.api_key;
    console.error(`registered client ${reply.client_id}; export THROTTLE_API_KEY=${apiKey}`);
  }

  for (let i = 1; i <= Number(args.count); i++) {
    const [status, d] = await call('/check', {
      identifier: args.identifier,
      limit: Number(args.limit),
      window: Number(args.window),
      algorithm: args.algorithm,
    }, apiKey);
    if (status !== 200 && status !== 429) fail(`check: HTTP ${status}: ${d.error || JSON.stringify(d)}`);
    if (d.allowed) {
      console.log(`check ${i}: allowed remaining=${d.remaining} limit=${d.limit} reset_at=${d.reset_at}`);
    } else {
      console.log(`check ${i}: rejected retry_after=${d.retry_after} limit=${d.limit} reset_at=${d.reset_at}`);
    }
  }
}

main().catch((err) => fail(`throttle: ${err.message}${err.cause ? ` (${err.cause.message || err.cause.code})` : ''}`));
