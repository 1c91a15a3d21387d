import test from 'node:test';
import assert from 'node:assert/strict';
import { forkInfo, forkReasonText } from './views/fork.js';

const session = { id: 's', turnCount: 3, providerSessionId: 'p1', activeTurnId: '' };
const turn = (seq, extra = {}) => ({ id: `t${seq}`, seq, phase: 'settled', providerTurnId: `ensemble:p1:m${seq}`, providerSessionId: 'p1', ...extra });
const base = { role: 'member', connected: true, open: { session } };

test('fork: any_turn agents fork through every settled, bound turn', () => {
  const agent = { fork: 'any_turn' };
  assert.equal(forkInfo({ ...base, agent, turn: turn(1) }).show, true);
  assert.equal(forkInfo({ ...base, agent, turn: turn(3) }).show, true);
  assert.equal(forkInfo({ ...base, agent, turn: turn(2, { phase: 'durably_accepted' }) }).show, false);
  const unbound = forkInfo({ ...base, agent, turn: turn(2, { providerTurnId: '' }) });
  assert.equal(unbound.show, false);
  assert.equal(unbound.reason, 'fork_point_unbound');
  assert.match(unbound.title, /^Fork unavailable: /);
});

test('fork: latest_turn agents only through the latest turn of an idle session', () => {
  const agent = { fork: 'latest_turn' };
  assert.equal(forkInfo({ ...base, agent, turn: turn(3) }).show, true);
  assert.equal(forkInfo({ ...base, agent, turn: turn(2) }).reason, 'fork_point_not_latest');
  const busy = { ...base, open: { session: { ...session, activeTurnId: 't4', turnCount: 4 } } };
  assert.equal(forkInfo({ ...busy, agent, turn: turn(3) }).reason, 'fork_point_not_latest');
  assert.equal(forkInfo({ ...base, agent, turn: turn(3, { providerSessionId: 'p0' }) }).reason, 'fork_provider_session_mismatch');
});

test('fork: unattested agents, viewers, sub-agent sessions and in-flight forks', () => {
  assert.equal(forkInfo({ ...base, agent: { forkReason: 'fork_not_supported' }, turn: turn(3) }).reason, 'fork_not_supported');
  assert.equal(forkInfo({ ...base, agent: null, turn: turn(3) }).reason, 'agent_capabilities_unknown');
  const viewer = forkInfo({ ...base, role: 'viewer', agent: { fork: 'any_turn' }, turn: turn(3) });
  assert.equal(viewer.show, false);
  assert.equal(viewer.reason, '');
  const sub = { ...base, open: { session: { ...session, parentId: 'root' } } };
  assert.equal(forkInfo({ ...sub, agent: { fork: 'any_turn' }, turn: turn(3) }).reason, 'fork_of_subagent_session');
  const busy = forkInfo({ ...base, agent: { fork: 'any_turn' }, turn: turn(3), inFlight: true });
  assert.equal(busy.show, true);
  assert.equal(busy.disabled, true);
  assert.equal(forkInfo({ ...base, connected: false, agent: { fork: 'any_turn' }, turn: turn(3) }).disabled, true);
  for (const r of ['fork_not_supported', 'fork_point_not_latest', 'something_new']) assert.ok(forkReasonText(r).length > 10);
});
