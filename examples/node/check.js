#!/usr/bin/env node
// Ask Throttle whether a request may go ahead (Node 18+, no dependencies).
//
//   THROTTLE_URL=http://localhost:8080 node examples/node/check.js --count 5 --limit 3
//
// Uses THROTTLE_API_KEY when set; otherwise registers a client of its own (a
// name and email of the run's own, to tell it from the server's others) and
// prints its key (shown once: keep it). Prints one line per check:
//
//   check 1: allowed remaining=2 limit=3 reset_at=1767225600
//   check 4: rejected retry_after=42 limit=3 reset_at=1767225600
//
// Typed from the API's OpenAPI document: throttle-api.d.ts is generated from
// it (npx openapi-typescript http://localhost:8080/openapi.json -o
// throttle-api.d.ts), and `tsc -p examples/node` type-checks this file
// against it (// @ts-check, the JSDoc types below); the tests do both.
// @ts-check
'use strict';

const { parseArgs } = require('node:util');

/** @typedef {import('./throttle-api').components['schemas']} Schemas */
/** @typedef {Schemas['Error']} ApiError */

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

/**
 * POST body as JSON; resolve to [status, reply]. Error statuses are replies too.
 * @param {string} path
 * @param {Schemas['RegisterRequest'] | Schemas['CheckRequest']} body
 * @param {string} [apiKey]
 * @returns {Promise<[number, any]>}
 */
async function call(path, body, apiKey) {
  /** @type {Record<string, string>} */
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

/**
 * @param {Schemas['RegisterRequest']} body
 * @returns {Promise<[number, Schemas['Registered'] | ApiError]>}
 */
const register = (body) => call('/register', body);

/**
 * @param {Schemas['CheckRequest']} body
 * @param {string} apiKey
 * @returns {Promise<[number, Schemas['Decision'] | ApiError]>}
 */
const check = (body, apiKey) => call('/check', body, apiKey);

/**
 * @param {string} msg
 * @returns {never}
 */
function fail(msg) {
  console.error(msg);
  process.exit(1);
}

/**
 * @param {string} name
 * @returns {Schemas['Algorithm']}
 */
function algorithm(name) {
  switch (name) {
    case 'fixed_window':
    case 'sliding_window':
    case 'token_bucket':
    case 'gcra':
      return name;
  }
  return fail(`--algorithm must be fixed_window, sliding_window, token_bucket or gcra, not ${name}`);
}

async function main() {
  const alg = algorithm(args.algorithm);
  let apiKey = process.env.THROTTLE_API_KEY;
  if (!apiKey) {
    const run = `${Math.floor(Date.now() / 1000)}-${process.pid}`;
    const [status, reply] = await register({
      name: `node-example-${run}`,
      email: `node-${run}@example.com`,
      default_algorithm: alg,
    });
    if ('error' in reply || status !== 201) fail(`register: HTTP ${status} ${'code' in reply ? reply.code : ''}: ${'error' in reply ? reply.error : JSON.stringify(reply)}`);
    apiKey = reply.api_key;
    console.error(`registered client ${reply.client_id}; export THROTTLE_API_KEY=${apiKey}`);
  }

  for (let i = 1; i <= Number(args.count); i++) {
    const [status, d] = await check({
      identifier: args.identifier,
      limit: Number(args.limit),
      window: Number(args.window),
      algorithm: alg,
    }, apiKey);
    if ('error' in d) fail(`check: HTTP ${status}: ${d.error}`);
    if (d.allowed) {
      console.log(`check ${i}: allowed remaining=${d.remaining} limit=${d.limit} reset_at=${d.reset_at}`);
    } else {
      console.log(`check ${i}: rejected retry_after=${d.retry_after} limit=${d.limit} reset_at=${d.reset_at}`);
    }
  }
}

main().catch((err) => fail(`throttle: ${err.message}${err.cause ? ` (${err.cause.message || err.cause.code})` : ''}`));
