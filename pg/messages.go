package pg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

const messageCols = `workspace_id, session_id, id, turn_id, role, kind, version, ordinal,
	content_json, tool_json, streaming, author, created_at, updated_at, text, author_name`

// partsText is the appended pieces of the messages row in scope, in offset
// order (empty without any): a streaming message's text is messages.text
// followed by them (pg/migrations/00009_message_parts.sql).
const partsText = `coalesce((SELECT string_agg(p.text, '' ORDER BY p.off) FROM message_parts p
	WHERE p.workspace_id = messages.workspace_id AND p.session_id = messages.session_id
	  AND p.message_id = messages.id), '')`

// messageRead is messageCols for a SELECT FROM messages: the text of a
// message that is still streaming includes its appended pieces, and its
// version is the one its last append set, so every reader (message.list,
// Changes, snapshots, export) sees the exact message.
const messageRead = `workspace_id, session_id, id, turn_id, role, kind,
	` + sqlstore.MessageVersion + ` AS version, ordinal,
	content_json, tool_json, streaming, author, created_at, updated_at,
	CASE WHEN streaming THEN text || ` + partsText + ` ELSE text END, author_name`

func scanMessage(row sqlstore.Scanner) (host.Message, error) {
	var (
		m          host.Message
		role, kind string
		content    string
		text       string
		tool       *string
	)
	err := row.Scan(&m.WorkspaceID, &m.SessionID, &m.ID, &m.TurnID, &role, &kind, &m.Version,
		&m.Ordinal, &content, &tool, &m.Streaming, &m.Author, &m.CreatedAt, &m.UpdatedAt, &text, &m.AuthorName)
	if err != nil {
		return host.Message{}, err
	}
	m.Role, m.Kind = host.Role(role), host.MessageKind(kind)
	m.CreatedAt, m.UpdatedAt = utc(m.CreatedAt), utc(m.UpdatedAt)
	if err := json.Unmarshal([]byte(content), &m.Content); err != nil {
		return host.Message{}, fmt.Errorf("message %s: decode content: %w", m.ID, err)
	}
	m.Content.Text = text
	if tool != nil {
		m.Tool = new(host.ToolCall)
		if err := json.Unmarshal([]byte(*tool), m.Tool); err != nil {
			return host.Message{}, fmt.Errorf("message %s: decode tool: %w", m.ID, err)
		}
	}
	return m, nil
}

func (t *tx) Message(ctx context.Context, ws, sessionID, messageID string) (host.Message, error) {
	if t.failed != nil {
		return host.Message{}, t.failed
	}
	m, err := scanMessage(t.tx.QueryRow(ctx, `SELECT `+messageRead+` FROM messages
		WHERE workspace_id = $1 AND session_id = $2 AND id = $3`, ws, sessionID, messageID))
	if isNoRows(err) {
		return host.Message{}, dialect.NotFound("message " + messageID)
	}
	if err != nil {
		return host.Message{}, t.fail(classify("get message", err))
	}
	return m, nil
}

// PutMessage inserts the message or replaces every column of the existing
// one with the same (workspace, session, id). The text lives in its own
// column (appends never touch content_json).
func (t *tx) PutMessage(ctx context.Context, m host.Message) error {
	if t.failed != nil {
		return t.failed
	}
	text := m.Content.Text
	m.Content.Text = ""
	content, err := json.Marshal(m.Content)
	if err != nil {
		return fmt.Errorf("pg: put message %s: encode content: %w", m.ID, err)
	}
	tool, err := sqlstore.EncodeTool("pg", m.ID, m.Tool)
	if err != nil {
		return err
	}
	// The whole text goes to messages.text: no appended piece may remain.
	// An upsert has no answer but failure, and the Host only returns that:
	// it goes with the next round trip (txconn.go).
	t.tx.queue(deferred{op: "put message", late: true, sql: `WITH d AS (DELETE FROM message_parts
			WHERE workspace_id = $1 AND session_id = $2 AND message_id = $3)
		INSERT INTO messages (` + messageCols + `, text_len)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (workspace_id, session_id, id) DO UPDATE SET
			text = excluded.text, text_len = excluded.text_len,
			turn_id = excluded.turn_id, role = excluded.role, kind = excluded.kind,
			version = excluded.version, stream_version = NULL, ordinal = excluded.ordinal,
			content_json = excluded.content_json, tool_json = excluded.tool_json,
			streaming = excluded.streaming, author = excluded.author,
			created_at = excluded.created_at, updated_at = excluded.updated_at,
			author_name = excluded.author_name`,
		args: []any{m.WorkspaceID, m.SessionID, m.ID, m.TurnID, string(m.Role), string(m.Kind), m.Version,
			m.Ordinal, string(content), tool, m.Streaming, m.Author, m.CreatedAt, m.UpdatedAt,
			text, m.AuthorName, host.UTF16Len(text)}})
	return nil
}

// AppendMessage implements host.OutputTx in one statement. It creates the
// message (its first piece in messages.text) or records an append: while the
// message stays open the row only gets its new length, version and tool
// (messages.text is not rewritten, so an unchanged TOAST value is carried
// over and the UPDATE costs the same at any length) and the piece is
// inserted into message_parts at its UTF-16 offset. Closing folds
// messages.text, every piece and this one into messages.text and deletes
// the pieces. The cost of an append does not grow with the message.
func (t *tx) AppendMessage(ctx context.Context, a host.MessageAppend) (host.AppendResult, error) {
	if t.failed != nil {
		return host.AppendResult{}, t.failed
	}
	tool, err := sqlstore.EncodeTool("pg", a.ID, a.Tool)
	if err != nil {
		return host.AppendResult{}, err
	}
	if a.OffsetKnown || a.New {
		// Nothing to wait for: the statement refuses the transaction on
		// the server unless it found the message a.Offset long (or created
		// it), so it goes with the next round trip (COMMIT's, for an
		// output commit).
		sql, want := appendKnownSQL, a.Offset+a.TextLen
		if a.New {
			sql, want = appendNewSQL, a.TextLen
		}
		t.tx.queue(deferred{op: "append message " + a.ID, late: true, sql: sql,
			args: []any{a.WorkspaceID, a.SessionID, a.ID, a.TurnID, string(a.Role), string(a.Kind), a.Version,
				tool, !a.Done, a.At, a.Text, a.TextLen, want}})
		return host.AppendResult{Offset: a.Offset, Created: a.New}, nil
	}
	var n, ordinal int64
	err = t.tx.QueryRow(ctx, appendMessageSQL,
		a.WorkspaceID, a.SessionID, a.ID, a.TurnID, string(a.Role), string(a.Kind), a.Version,
		tool, !a.Done, a.At, a.Text, a.TextLen).Scan(&n, &ordinal)
	if err != nil {
		return host.AppendResult{}, t.fail(classify("append message", err))
	}
	return host.AppendResult{Offset: int(n) - a.TextLen, Created: ordinal == a.Version}, nil
}

// appendMessageSQL: m upserts the message; p inserts the piece when the
// message existed and is still streaming; d deletes the pieces when this
// append closes it (m's fold and d read the same snapshot of the pieces).
// While the message streams m changes no indexed column (the version goes
// to stream_version), so its update is HOT: no index entry per chunk.
const appendMessageSQL = appendCTEs + `SELECT text_len, ordinal FROM m`

// appendKnownSQL is appendMessageSQL for an append whose offset the caller
// knows: it fails the transaction unless the message existed and is now
// $13 long.
var appendKnownSQL = appendCTEs + fenceSQL("text_len = $13 AND ordinal <> $7", codeFenceNotFound) + ` FROM m`

// appendNewSQL is appendMessageSQL for a message the caller knows is new:
// it fails the transaction unless this statement created the message
// (its ordinal is this version) $13 long.
var appendNewSQL = appendCTEs + fenceSQL("text_len = $13 AND ordinal = $7", codeFenceNotFound) + ` FROM m`

const appendCTEs = `WITH m AS (
	INSERT INTO messages (workspace_id, session_id, id, turn_id, role,
		kind, version, ordinal, content_json, tool_json, streaming, author, created_at,
		updated_at, text, text_len)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $7, '{}', $8, $9, '', $10, $10, $11, $12)
	ON CONFLICT (workspace_id, session_id, id) DO UPDATE SET
		text = CASE WHEN messages.streaming AND excluded.streaming THEN messages.text
			ELSE messages.text || CASE WHEN messages.streaming THEN ` + partsText + ` ELSE '' END
				|| excluded.text END,
		text_len = messages.text_len + excluded.text_len,
		tool_json = coalesce(excluded.tool_json, messages.tool_json),
		streaming = messages.streaming AND excluded.streaming,
		version = CASE WHEN messages.streaming AND excluded.streaming THEN messages.version
			ELSE excluded.version END,
		stream_version = CASE WHEN messages.streaming AND excluded.streaming THEN excluded.version END,
		updated_at = excluded.updated_at
	RETURNING text_len, ordinal, streaming
), p AS (
	INSERT INTO message_parts (workspace_id, session_id, message_id, off, text)
	SELECT $1, $2, $3, m.text_len - $12, $11 FROM m
	WHERE m.streaming AND m.ordinal <> $7 AND $11 <> ''
), d AS (
	DELETE FROM message_parts
	WHERE NOT $9 AND workspace_id = $1 AND session_id = $2 AND message_id = $3
)
`

// ListMessages selects messages by version, always returned ascending.
// AfterVersion (or neither bound) pages forward from the oldest change;
// BeforeVersion alone pages backward from the newest change below it.
func (s *Store) ListMessages(ctx context.Context, ws, sessionID string, q host.MessageQuery) (host.MessagePage, error) {
	limit := host.ClampLimit(q.Limit, 200, 1000)
	backward := q.BeforeVersion > 0 && q.AfterVersion <= 0
	query, args := sqlstore.VersionQuery{Read: messageRead, Mark: "$", WorkspaceID: ws, SessionID: sessionID, TurnID: q.TurnID,
		After: q.AfterVersion, Before: q.BeforeVersion, Desc: backward, Limit: limit + 1}.SQL()

	return withPool(ctx, s, func(db querier) (host.MessagePage, error) {
		msgs, err := queryRows(ctx, db, "list messages", query, args, sqlstore.All(scanMessage))
		return sqlstore.MessagePage(msgs, limit, backward), err
	})
}
