package sqlstore

import "strconv"

// MessageVersion is a message's version as both stores keep it: a
// streaming message's current version is in stream_version, which no index
// holds, so a streamed append leaves every index of the row alone
// (migrations 00017); version is the one it was created or last closed at.
const MessageVersion = `coalesce(stream_version, version)`

// VersionQuery selects a session's messages in version order.
type VersionQuery struct {
	Read string // the store's column list; its version column is MessageVersion AS version
	Mark string // the dialect's placeholder prefix: "$" or "?"

	WorkspaceID, SessionID string
	TurnID                 string // "" for every Turn's

	After, Before int64 // exclusive bounds, 0 for none
	Desc          bool
	Limit         int
}

// SQL returns the query and its arguments. Closed messages come through
// messages_version in order, cut at the limit; the streaming ones (a few
// per session at most, through messages_streaming) are merged in by their
// current version.
func (q VersionQuery) SQL() (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return q.Mark + strconv.Itoa(len(args))
	}
	where := `workspace_id = ` + arg(q.WorkspaceID) + ` AND session_id = ` + arg(q.SessionID)
	if q.TurnID != "" {
		where += ` AND turn_id = ` + arg(q.TurnID)
	}
	var after, before string
	if q.After > 0 {
		after = arg(q.After)
	}
	if q.Before > 0 {
		before = arg(q.Before)
	}
	limit := arg(q.Limit)
	bounds := func(v string) string {
		s := ""
		if after != "" {
			s += ` AND ` + v + ` > ` + after
		}
		if before != "" {
			s += ` AND ` + v + ` < ` + before
		}
		return s
	}
	dir := "ASC"
	if q.Desc {
		dir = "DESC"
	}
	return `SELECT * FROM (
		SELECT * FROM (SELECT ` + q.Read + ` FROM messages WHERE ` + where + ` AND NOT streaming` +
		bounds("messages.version") + ` ORDER BY messages.version ` + dir + ` LIMIT ` + limit + `) closed
		UNION ALL
		SELECT ` + q.Read + ` FROM messages WHERE ` + where + ` AND streaming` + bounds(MessageVersion) + `
	) m ORDER BY version ` + dir + ` LIMIT ` + limit, args
}
