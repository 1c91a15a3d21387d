// Durable session stream positions (docs/protocol.md, "Stream positions").
// A session subscription's position is {epoch, version}: the epoch names the
// session's message history and the version is a canonical message
// version, so the same position means the same state on every replica. The
// client sends it back on subscribe and any replica recovers from it; the
// per-subscription {epoch, seq} only matches the replica that served it.
// Pure functions: testable under node.

// positionAfterResult is the position a subscribe answer leaves the client
// at: the one it names, else (recovered without one) the one it had, else
// none until an event carries a version.
export function positionAfterResult(prev, res) {
  const p = res && res.position;
  if (p && typeof p.epoch === 'string' && p.epoch && Number.isInteger(p.version) && p.version >= 0) {
    return { epoch: p.epoch, version: p.version };
  }
  return res && res.recovered === true ? prev || null : null;
}

// positionAfterEvent advances the position with an event that ends at one
// (it carries `version`); versions only move forward.
export function positionAfterEvent(pos, ev) {
  if (!pos || !ev || !Number.isInteger(ev.version) || ev.version <= pos.version) return pos;
  return { epoch: pos.epoch, version: ev.version };
}

// withPosition adds the position to a session subscribe input.
export function withPosition(input, pos) {
  if (!pos || !input || input.topic !== 'session') return input;
  return { ...input, position: { epoch: pos.epoch, version: pos.version } };
}

// applyChanges applies the `changes` of a recovered subscribe (the current
// session and turn window, the interaction tree, presence, goal and queue,
// and complete messages changed after the position) through the store's
// own event handling, as latest-wins updates. Returns whether anything was
// applied.
export function applyChanges(applyEvent, state, changes) {
  if (!changes) return false;
  let any = false;
  if (changes.session) any = applyEvent(state, 'session_summary', { session: changes.session }) || any;
  for (const turn of Array.isArray(changes.turns) ? changes.turns : []) {
    any = applyEvent(state, 'turn_update', { turn }) || any;
  }
  for (const message of Array.isArray(changes.messages) ? changes.messages : []) {
    any = applyEvent(state, 'message_update', { message }) || any;
  }
  if (changes.interactionTree) any = applyEvent(state, 'interaction_snapshot', changes.interactionTree) || any;
  if (changes.presence) any = applyEvent(state, 'presence', changes.presence) || any;
  if (changes.goal) any = applyEvent(state, 'goal_state', changes.goal) || any;
  if (changes.queue) any = applyEvent(state, 'queue', changes.queue) || any;
  return any;
}
