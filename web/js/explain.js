// Plain-language explanations: every error code of the protocol and every
// turn failure reason gets a sentence saying what happened and what to do
// next. Pure; node unit tests check that no code is left raw.

// The protocol's closed list of error codes (docs/protocol.md).
export const ERROR_CODES = [
  'unauthenticated', 'forbidden', 'not_found', 'invalid_input', 'operation_conflict', 'session_busy',
  'not_dispatched', 'outcome_unknown', 'unsupported', 'rate_limited', 'unavailable', 'internal',
];

const ERRORS = {
  unauthenticated: ['Your sign-in is no longer accepted.', 'Open a fresh sign-in link.'],
  forbidden: ['Your role in this workspace does not allow that.', 'Ask a workspace admin for a member link.'],
  not_found: ['That no longer exists, or it is in a workspace you cannot see.', 'Reload the session list.'],
  invalid_input: ['The server could not accept that request as sent.', 'Check the message and try again.'],
  operation_conflict: ['Someone else changed this at the same moment.', 'Look at the latest state and try again.'],
  session_busy: ['The agent is still working on the previous message.', 'Wait for it to finish, or press Stop.'],
  not_dispatched: ['The message never reached the agent.', 'Retry this prompt: it is sent once.'],
  outcome_unknown: ['The agent may or may not have received this; its outcome is unknown.', 'Retry this prompt: the same id is reused, so it never runs twice.'],
  unsupported: ['This server does not support that yet.', 'Use another way, or ask the operator.'],
  rate_limited: ['Too many requests in a short time.', 'Wait a moment; it is retried automatically.'],
  unavailable: ['The server cannot do that right now.', 'It is retried when the connection is back; otherwise try again shortly.'],
  internal: ['Something went wrong on the server.', 'Try again; if it keeps happening, tell the operator.'],
};

// explainError: {text, next, code} for a RequestError or a wire error.
export function explainError(err) {
  const code = (err && err.code) || 'internal';
  if (err && err.reason === 'connection_lost') {
    return { code, text: 'The connection dropped before the server answered.', next: 'It is retried once the connection is back.' };
  }
  const [text, next] = ERRORS[code] || ['Something went wrong.', 'Try again.'];
  return { code, text, next };
}

// errorLine is one line for inline errors: sentence, next step, and the
// server's own message for detail.
export function errorLine(err) {
  const e = explainError(err);
  const detail = err && err.message && err.code !== 'internal' ? ` (${err.message})` : '';
  return `${e.text} ${e.next}${detail}`;
}

const FAILURES = {
  execution_status_unknown: ['The agent lost track of this turn, so its result is unknown.', 'Retry this prompt.'],
  provider_rejected: ['The agent refused the prompt.', 'Rephrase it, or check the agent’s configuration.'],
  provider_state_lost: ['The agent lost this conversation’s state (it restarted).', 'Retry this prompt; earlier context may be gone.'],
  delivery_unknown: ['The prompt may not have reached the agent.', 'Retry this prompt.'],
  provider_error: ['The agent reported an error.', 'Retry this prompt.'],
  max_tokens: ['The agent ran out of room for its answer.', 'Ask for a shorter answer, or continue in a new message.'],
  refusal: ['The agent declined to answer.', 'Rephrase the prompt.'],
  outcome_unknown: ['The outcome is unknown.', 'Retry this prompt.'],
  server_shutdown: ['The server restarted while the agent was working (a planned restart, not a crash).', 'Retry this prompt.'],
};

export function explainFailure(reason) {
  const [text, next] = FAILURES[reason] || ['The turn failed.', 'Retry this prompt.'];
  return { text, next };
}

export const FAILURE_REASONS = Object.keys(FAILURES);

// closeReason explains why the live connection went away.
export function explainDisconnect(info) {
  const reason = (info && info.reason) || '';
  if (/shutting down|restart/i.test(reason)) return 'The server is restarting — live updates paused, reconnecting…';
  if (/offline/i.test(reason)) return 'Your browser is offline — live updates paused, reconnecting when it is back…';
  return 'Live updates paused — reconnecting…';
}
