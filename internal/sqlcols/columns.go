package sqlcols

// Column lists of the canonical tables, in the order both stores' row
// codecs scan them. The tables have the same columns on both dialects
// (internal/sqlstore TestStoresReachTheSameSchema), so one list each;
// key columns come first so a row that fails to decode can still be
// named (and quarantined).

const (
	Sessions = `workspace_id, id, parent_id, root_id, title, title_explicit, agent,
		simulated, settings_json, pinned, provider_session_id, message_version, turn_count,
		active_turn_id, provisional, created_by, created_at, updated_at, deleted_at, context_lost`
	Tombstones = Sessions + `, deletion_generation, deleted_root_id, deleted_by, deleted_by_name, restorable`
	Turns      = `workspace_id, session_id, id, seq, origin, phase, outcome, failure_reason,
		stop_reason, provider_session_id, provider_turn_id, client_submit_id,
		identity_anchor_turn_id, retracted, cancel_requested, submitted_by, created_at,
		updated_at, settled_at, applied_seq, labels_json`
	Claims = `workspace_id, client_submit_id, session_id, turn_id, digest, content_json,
		state, created_at, updated_at`
	QueueEntries = `workspace_id, session_id, id, position, disposition, state, client_submit_id,
		author, author_name, content_json, digest, target_turn_id, turn_id, admitted_revision,
		revision, retracted_by, created_at, updated_at`
	Interactions = `workspace_id, session_id, turn_id, request_id, root_session_id, kind,
		title, prompt, options_json, tool_json, state, response_json, answered_by, answered_by_name,
		answered_at, resolution, operation_id, created_at, updated_at`
	Operations = `workspace_id, id, kind, session_id, turn_id, request_id, response_json,
		responded_by, responded_by_name, state, attempts, next_attempt_at, lease_replica, lease_epoch,
		lease_expires_at, result, reason, followup_json, followup_turn_id, last_error, created_at,
		updated_at`
)

// SessionSummaryFrom reads sessions (as s) with their goal summary in the
// same statement: the session's columns, the live goal's record and the
// identity of the session's newest fence (host.SummarizeGoal). The text
// is the same on both dialects; callers add SELECT and their WHERE. Only
// pool reads (get, list, changes) use it; a transaction's locking read
// stays on sessions.
var SessionSummaryFrom = Prefixed("s.", Sessions) + `, g.state_json,
	CASE WHEN g.status = 'active' THEN (SELECT f.operation_id || ' ' || f.revision FROM goal_fences f
		WHERE f.workspace_id = s.workspace_id AND f.session_id = s.id
		ORDER BY f.revision DESC, f.operation_id DESC LIMIT 1) END
	FROM sessions s LEFT JOIN goals g ON g.workspace_id = s.workspace_id AND g.session_id = s.id
		AND g.status IN ('active', 'paused')`
