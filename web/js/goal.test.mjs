// applyGoalState (views/goal.js): the goal bar keeps the newest goal state;
// a held state at the same seq (a delete or an import holds the goal
// without changing it) supersedes the unheld one, never the reverse.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyGoalState } from './views/goal.js';

const gs = (seq, held) => ({ sessionId: 's1', seq, held, goal: { status: 'active' } });

test('goal states apply by seq, and held at the same seq', () => {
  const open = { id: 's1', goal: null };
  assert.equal(applyGoalState(open, gs(2, false)), true);
  assert.equal(applyGoalState(open, gs(1, false)), false, 'older');
  assert.equal(applyGoalState(open, gs(2, false)), false, 'duplicate');
  assert.equal(applyGoalState(open, gs(2, true)), true, 'held at the same seq');
  assert.equal(open.goal.held, true);
  assert.equal(applyGoalState(open, gs(2, false)), false, 'a late unheld copy');
  assert.equal(applyGoalState(open, gs(2, true)), false, 'duplicate held');
  assert.equal(applyGoalState(open, gs(3, false)), true, 'resumed');
  assert.equal(applyGoalState(open, { ...gs(9, false), sessionId: 'other' }), false, 'another session');
});
