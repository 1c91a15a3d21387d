// Fork on settled turns, and the session's pin and settings controls.
// Fork is offered only where the agent attests it for exactly that turn
// (the ready frame's agent.fork: any_turn, or latest_turn = only the newest
// settled turn of an idle session); elsewhere the button stays hidden and
// the turn's status line says why on hover.

import { h, setText } from '../dom.js';
import { errorLine } from '../explain.js';

const REASONS = {
  agent_capabilities_unknown: 'The agent has not connected since the server started, so it cannot confirm a fork yet.',
  fork_not_supported: 'This agent cannot fork sessions.',
  fork_point_unbound: 'The agent never confirmed this turn, so it cannot fork through it.',
  fork_point_not_latest: 'This agent forks only through the latest turn of an idle session.',
  fork_provider_session_mismatch: 'This turn ran in an agent session this session no longer uses.',
  fork_of_subagent_session: 'A sub-agent session is forked through its parent.',
};

export function forkReasonText(reason) {
  return REASONS[reason] || `The agent cannot fork here (${reason}).`;
}

// forkInfo: may this turn be forked now? {show, reason, title, busy}.
// Only settled turns of root sessions, only for members.
export function forkInfo({ agent, role, open, turn, connected, inFlight }) {
  const s = open && open.session;
  if (!s || !turn || turn.phase !== 'settled' || role === 'viewer' || !role || open.deleted) return { show: false, reason: '' };
  let reason = '';
  if (s.parentId) reason = 'fork_of_subagent_session';
  else if (!turn.providerTurnId) reason = 'fork_point_unbound';
  else if (!agent || !agent.fork) reason = (agent && agent.forkReason) || 'agent_capabilities_unknown';
  else if (agent.fork === 'latest_turn') {
    if (turn.seq !== s.turnCount || s.activeTurnId) reason = 'fork_point_not_latest';
    else if (turn.providerSessionId !== s.providerSessionId) reason = 'fork_provider_session_mismatch';
  }
  if (reason) return { show: false, reason, title: `Fork unavailable: ${forkReasonText(reason)}` };
  return {
    show: true, reason: '', busy: !!inFlight, disabled: !connected || !!inFlight,
    title: 'Fork: a new session with this conversation up to and including this turn',
  };
}

// createSessionControls adds Pin and Settings to the session bar.
export function createSessionControls({ bar, after, request, onError, onChanged }) {
  const pin = h('button', { type: 'button', id: 'session-pin', class: 'btn btn-small btn-secondary', 'aria-pressed': 'false' });
  const gear = h('button', { type: 'button', id: 'session-settings-btn', class: 'btn btn-small btn-secondary', text: 'Settings', 'aria-expanded': 'false' });
  const cwd = h('input', { id: 'settings-cwd', type: 'text', maxlength: '4096', placeholder: 'relative to the workspace root, e.g. my-project', 'aria-label': 'Working directory' });
  const save = h('button', { type: 'submit', id: 'settings-save', class: 'btn btn-small', text: 'Save' });
  const cancel = h('button', { type: 'button', class: 'btn btn-small btn-secondary', text: 'Cancel' });
  const err = h('div', { id: 'settings-error', class: 'inline-error', role: 'alert', hidden: true });
  const current = h('div', { id: 'settings-current', class: 'settings-current' });
  const panel = h('form', { id: 'session-settings', class: 'session-settings', hidden: true },
    h('label', { for: 'settings-cwd', text: 'Working directory' }), cwd, save, cancel, current, err);
  bar.querySelector('.session-bar-meta').append(pin, gear);
  after.after(panel);

  let open = null;
  let canEdit = false;
  function show(on) {
    panel.hidden = !on;
    gear.setAttribute('aria-expanded', on ? 'true' : 'false');
    err.hidden = true;
    if (on && open && open.session) {
      cwd.value = (open.session.settings || {}).cwd || '';
      cwd.focus();
    }
  }
  pin.addEventListener('click', async () => {
    if (!open || !open.session) return;
    pin.disabled = true;
    try {
      const res = await request('session.update', { sessionId: open.id, pinned: !open.session.pinned });
      onChanged(res.session);
    } catch (e) {
      onError(e);
    } finally {
      pin.disabled = !canEdit;
    }
  });
  gear.addEventListener('click', () => show(panel.hidden));
  cancel.addEventListener('click', () => show(false));
  panel.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!open || !open.session) return;
    const settings = { ...(open.session.settings || {}) };
    const v = cwd.value.trim();
    if (v) settings.cwd = v;
    else delete settings.cwd;
    save.disabled = true;
    try {
      const res = await request('session.update', { sessionId: open.id, settings });
      onChanged(res.session);
      show(false);
    } catch (ex) {
      setText(err, errorLine(ex));
      err.hidden = false;
    } finally {
      save.disabled = false;
    }
  });

  return {
    render(o, { editable }) {
      if (!o || o.id !== (open && open.id)) show(false);
      open = o;
      canEdit = !!editable;
      const s = (o && o.session) || {};
      const pinned = !!s.pinned;
      setText(pin, pinned ? 'Pinned' : 'Pin');
      pin.setAttribute('aria-pressed', pinned ? 'true' : 'false');
      pin.title = canEdit ? (pinned ? 'Unpin this session (for everyone)' : 'Pin this session (for everyone)') : 'Viewers cannot pin';
      pin.disabled = !canEdit;
      // A deleted session shows only its notice (and Restore): no pin state.
      pin.hidden = !!(o && o.deleted);
      gear.hidden = !canEdit;
      if (!canEdit && !panel.hidden) show(false);
      const c = (s.settings || {}).cwd;
      setText(current, c ? `Now: ${c}` : 'Now: the workspace root');
    },
  };
}
