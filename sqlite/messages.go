package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

const messageCols = `workspace_id, session_id, id, turn_id, role, kind, version, ordinal,
	content_json, tool_json, streaming, author, created_at, updated_at, text, author_name`

// partsText is the appended pieces of the messages row in scope, in offset
// order (empty without any): a streaming message's text is messages.text
// followed by them (sqlite/migrations/00009_message_parts.sql).
const partsText = `coalesce((SELECT group_concat(p.text, '' ORDER BY p.off) FROM message_parts p
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

func scanMessage(sc scanner) (host.Message, error) {
	var (
		m                host.Message
		role, kind       string
		content, text    string
		tool             sql.NullString
		streaming        int64
		created, updated int64
	)
	err := sc.Scan(&m.WorkspaceID, &m.SessionID, &m.ID, &m.TurnID, &role, &kind, &m.Version,
		&m.Ordinal, &content, &tool, &streaming, &m.Author, &created, &updated, &text, &m.AuthorName)
	if err != nil {
		return host.Message{}, err
	}
	m.Role, m.Kind, m.Streaming = host.Role(role), host.MessageKind(kind), streaming != 0
	m.CreatedAt, m.UpdatedAt = fromMS(created), fromMS(updated)
	if err := json.Unmarshal([]byte(content), &m.Content); err != nil {
		return host.Message{}, fmt.Errorf("message %s: decode content: %w", m.ID, err)
	}
	m.Content.Text = text
	if tool.Valid {
		m.Tool = new(host.ToolCall)
		if err := json.Unmarshal([]byte(tool.String), m.Tool); err != nil {
			return host.Message{}, fmt.Errorf("message %s: decode tool: %w", m.ID, err)
		}
	}
	return m, nil
}

func getMessage(ctx context.Context, q querier, ws, sessionID, id string) (host.Message, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+messageRead+` FROM messages
		WHERE workspace_id = ? AND session_id = ? AND id = ?`, ws, sessionID, id), scanMessage, "message "+id, "get message")
}

func (t *tx) Message(ctx context.Context, ws, sessionID, messageID string) (host.Message, error) {
	return getMessage(ctx, t.tx, ws, sessionID, messageID)
}

// PutMessage inserts the message or replaces every column of the existing
// one with the same (workspace, session, id). The text lives in its own
// column (appends never touch content_json).
func (t *tx) PutMessage(ctx context.Context, m host.Message) error {
	text := m.Content.Text
	m.Content.Text = ""
	content, err := json.Marshal(m.Content)
	if err != nil {
		return fmt.Errorf("sqlite: put message %s: encode content: %w", m.ID, err)
	}
	tool, err := sqlstore.EncodeTool("sqlite", m.ID, m.Tool)
	if err != nil {
		return err
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO messages (`+messageCols+`, text_len)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace_id, session_id, id) DO UPDATE SET
			text = excluded.text, text_len = excluded.text_len,
			turn_id = excluded.turn_id, role = excluded.role, kind = excluded.kind,
			version = excluded.version, stream_version = NULL, ordinal = excluded.ordinal,
			content_json = excluded.content_json, tool_json = excluded.tool_json,
			streaming = excluded.streaming, author = excluded.author,
			created_at = excluded.created_at, updated_at = excluded.updated_at,
			author_name = excluded.author_name`,
		m.WorkspaceID, m.SessionID, m.ID, m.TurnID, string(m.Role), string(m.Kind), m.Version,
		m.Ordinal, string(content), tool, boolInt(m.Streaming), m.Author, ms(m.CreatedAt),
		ms(m.UpdatedAt), text, m.AuthorName, host.UTF16Len(text))
	if err != nil {
		return classify("put message", err)
	}
	// The whole text is in messages.text now: no appended piece may remain.
	_, err = t.tx.ExecContext(ctx, deletePartsSQL, m.WorkspaceID, m.SessionID, m.ID)
	return classify("put message: parts", err)
}

// appendMessageSQL creates a message (its first piece in messages.text),
// appends to a closed one, or closes one: closing folds messages.text,
// every piece and this one into messages.text; deletePartsSQL then
// removes the pieces. Either way the row ends closed, its version in
// version and none in stream_version. An append that keeps a streaming
// message open never gets here: AppendMessage tries streamAppendSQL
// first, which only gives the row its new length, version and tool
// (messages.text is not touched, so the UPDATE costs the same at any
// length) and puts the piece in message_parts (insertPartSQL). The cost
// of an append does not grow with the message; the fold on close is one
// read of the pieces.
const appendMessageSQL = `INSERT INTO messages (workspace_id, session_id, id, turn_id, role, kind,
		version, ordinal, content_json, tool_json, streaming, author, created_at, updated_at,
		text, text_len)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, '{}', ?8, ?9, '', ?10, ?10, ?11, ?12)
	ON CONFLICT (workspace_id, session_id, id) DO UPDATE SET
		text = messages.text || CASE WHEN messages.streaming THEN ` + partsText + ` ELSE '' END
			|| excluded.text,
		text_len = messages.text_len + excluded.text_len,
		tool_json = coalesce(excluded.tool_json, messages.tool_json),
		streaming = 0,
		version = excluded.version, stream_version = NULL, updated_at = excluded.updated_at
	RETURNING text_len, ordinal`

// streamAppendSQL records an append that keeps a streaming message open.
// SQLite rewrites a page of every index whose columns an UPDATE names,
// whatever the values, so this names none: not version, not streaming
// (messages_streaming's condition); the version goes to stream_version.
// No row: the message is new or closed, and appendMessageSQL takes it.
const streamAppendSQL = `UPDATE messages SET text_len = text_len + ?1,
		tool_json = coalesce(?2, tool_json), stream_version = ?3, updated_at = ?4
	WHERE workspace_id = ?5 AND session_id = ?6 AND id = ?7 AND streaming
	RETURNING text_len`

// insertPartSQL records one appended piece of a streaming message.
const insertPartSQL = `INSERT INTO message_parts (workspace_id, session_id, message_id, off, text)
	VALUES (?, ?, ?, ?, ?)`

// deletePartsSQL removes a message's pieces once they are in messages.text.
const deletePartsSQL = `DELETE FROM message_parts
	WHERE workspace_id = ? AND session_id = ? AND message_id = ?`

// AppendMessage implements host.OutputTx with statements prepared once:
// while the message streams, its update and the insert of the piece;
// otherwise the upsert, then one delete of the folded pieces when this
// append closes it.
// With a.OffsetKnown it refuses (ErrNotFound, the transaction is then
// rolled back by the caller) an append that did not find the message
// a.Offset long, and with a.New one that did not create it.
func (t *tx) AppendMessage(ctx context.Context, a host.MessageAppend) (host.AppendResult, error) {
	res, err := t.appendMessage(ctx, a)
	switch {
	case err != nil:
	case a.OffsetKnown && (res.Created || res.Offset != a.Offset):
		return host.AppendResult{}, dialect.NotFound(fmt.Sprintf("message %s at length %d", a.ID, a.Offset))
	case a.New && !res.Created:
		return host.AppendResult{}, dialect.NotFound(fmt.Sprintf("message %s not yet written", a.ID))
	}
	return res, err
}

func (t *tx) appendMessage(ctx context.Context, a host.MessageAppend) (host.AppendResult, error) {
	tool, err := sqlstore.EncodeTool("sqlite", a.ID, a.Tool)
	if err != nil {
		return host.AppendResult{}, err
	}
	var n, ordinal int64
	if !a.Done {
		err = t.tx.QueryRowContext(ctx, streamAppendSQL, a.TextLen, tool, a.Version, ms(a.At),
			a.WorkspaceID, a.SessionID, a.ID).Scan(&n)
		switch {
		case err == nil:
			res := host.AppendResult{Offset: int(n) - a.TextLen}
			if a.Text != "" {
				_, err = t.tx.ExecContext(ctx, insertPartSQL, a.WorkspaceID, a.SessionID, a.ID, res.Offset, a.Text)
			}
			return res, classify("append message: parts", err)
		case !errors.Is(err, sql.ErrNoRows):
			return host.AppendResult{}, classify("append message", err)
		}
	}
	err = t.tx.QueryRowContext(ctx, appendMessageSQL,
		a.WorkspaceID, a.SessionID, a.ID, a.TurnID, string(a.Role), string(a.Kind), a.Version,
		tool, boolInt(!a.Done), ms(a.At), a.Text, a.TextLen).Scan(&n, &ordinal)
	if err != nil {
		return host.AppendResult{}, classify("append message", err)
	}
	// A new message has its text in the row; a closed one got this append
	// folded in; one this append closes leaves pieces to delete.
	res := host.AppendResult{Offset: int(n) - a.TextLen, Created: ordinal == a.Version}
	if !res.Created && a.Done {
		_, err = t.tx.ExecContext(ctx, deletePartsSQL, a.WorkspaceID, a.SessionID, a.ID)
	}
	if err != nil {
		return host.AppendResult{}, classify("append message: parts", err)
	}
	return res, nil
}

// ListMessages selects messages by version, always returned ascending.
// AfterVersion (or neither bound) pages forward from the oldest change;
// BeforeVersion alone pages backward from the newest change below it.
func (s *Store) ListMessages(ctx context.Context, ws, sessionID string, q host.MessageQuery) (host.MessagePage, error) {
	r, err := s.reader()
	if err != nil {
		return host.MessagePage{}, err
	}
	limit := host.ClampLimit(q.Limit, 200, 1000)
	backward := q.BeforeVersion > 0 && q.AfterVersion <= 0
	query, args := sqlstore.VersionQuery{Read: messageRead, Mark: "?", WorkspaceID: ws, SessionID: sessionID, TurnID: q.TurnID,
		After: q.AfterVersion, Before: q.BeforeVersion, Desc: backward, Limit: limit + 1}.SQL()
	msgs, err := queryRows(ctx, r, "list messages", query, args, sqlstore.All(scanMessage))
	return sqlstore.MessagePage(msgs, limit, backward), err
}
