import test from 'node:test';
import assert from 'node:assert/strict';
import { tokenFromHash, hashWithoutToken, decodeJwtPayload, principalFromClaims, isExpired, normalizeWorkspaces } from './auth.js';

function b64url(obj) {
  return Buffer.from(JSON.stringify(obj)).toString('base64url');
}
const jwt = (claims) => `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url(claims)}.sig`;

test('token from fragment, other params kept', () => {
  assert.equal(tokenFromHash('#token=abc.def.ghi'), 'abc.def.ghi');
  assert.equal(tokenFromHash('#session=s1&token=a.b.c'), 'a.b.c');
  assert.equal(tokenFromHash(''), null);
  assert.equal(tokenFromHash('#session=x'), null);
  assert.equal(hashWithoutToken('#token=a.b.c&session=s1'), '#session=s1');
  assert.equal(hashWithoutToken('#token=a.b.c'), '');
});

test('decode payload with unicode name', () => {
  const c = decodeJwtPayload(jwt({ sub: 'u1', name: 'Zoë Ölund', workspaces: { default: 'admin', team: 'viewer' } }));
  assert.equal(c.name, 'Zoë Ölund');
  const p = principalFromClaims(c);
  assert.equal(p.id, 'u1');
  assert.deepEqual(p.workspaces, [{ id: 'default', role: 'admin' }, { id: 'team', role: 'viewer' }]);
});

test('garbage tokens decode to null', () => {
  assert.equal(decodeJwtPayload('nope'), null);
  assert.equal(decodeJwtPayload('a.!!!.c'), null);
  assert.equal(decodeJwtPayload(`${b64url({})}.${Buffer.from('[1]').toString('base64url')}.x`), null);
});

test('workspace claim shapes', () => {
  assert.deepEqual(normalizeWorkspaces(['a', { id: 'b', role: 'member' }]), [{ id: 'a', role: '' }, { id: 'b', role: 'member' }]);
  assert.deepEqual(normalizeWorkspaces(undefined), []);
});

test('expiry with leeway', () => {
  const now = 1_000_000_000_000;
  assert.equal(isExpired({ exp: now / 1000 - 60 }, now), true);
  assert.equal(isExpired({ exp: now / 1000 - 10 }, now), false);
  assert.equal(isExpired({ exp: null }, now), false);
});
