import test from 'node:test';
import assert from 'node:assert/strict';
import { backoffDelay, shouldReconnect, classifyEvent } from './connection.js';

test('full-jitter backoff stays under the growing ceiling and the cap', () => {
  assert.equal(backoffDelay(0, { random: () => 0.999 }), 499);
  assert.equal(backoffDelay(3, { random: () => 0.5 }), 2000);
  assert.equal(backoffDelay(30, { random: () => 0.999 }), 9990);
  assert.equal(backoffDelay(5, { random: () => 0 }), 100); // floor
  for (let i = 0; i < 200; i++) {
    const d = backoffDelay(i % 12);
    assert.ok(d >= 100 && d <= 10000, String(d));
  }
});

test('close codes', () => {
  assert.equal(shouldReconnect(1006), true);
  assert.equal(shouldReconnect(4000), true);
  assert.equal(shouldReconnect(4499), true);
  assert.equal(shouldReconnect(4500), false);
  assert.equal(shouldReconnect(4999), false);
});

test('event sequencing', () => {
  const sub = { epoch: 'e1', seq: 5 };
  assert.equal(classifyEvent(sub, { epoch: 'e1', seq: 6 }), 'apply');
  assert.equal(classifyEvent(sub, { epoch: 'e1', seq: 5 }), 'duplicate');
  assert.equal(classifyEvent(sub, { epoch: 'e1', seq: 3 }), 'duplicate');
  assert.equal(classifyEvent(sub, { epoch: 'e1', seq: 8 }), 'resync');
  assert.equal(classifyEvent(sub, { epoch: 'e2', seq: 6 }), 'resync');
});
