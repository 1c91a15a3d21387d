package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
)

// JSON columns are TEXT on both stores. A nullable one travels as *string,
// which pgx and database/sql both bind and scan as NULL when nil.

// EncodeJSON is a JSON column's text.
func EncodeJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// NullJSON is a nullable JSON column: nil stays NULL.
func NullJSON[T any](v *T) (*string, error) {
	if v == nil {
		return nil, nil
	}
	s, err := EncodeJSON(v)
	return &s, err
}

// EncodeSettings stores no settings as NULL, so an empty map and a missing
// one read back alike.
func EncodeSettings(m map[string]string) (*string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode settings: %w", err)
	}
	s := string(b)
	return &s, nil
}

// DecodeSettings reads what EncodeSettings wrote; NULL, "" and {} are no
// settings.
func DecodeSettings(v *string) (map[string]string, error) {
	if v == nil || *v == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(*v), &m); err != nil {
		return nil, fmt.Errorf("decode settings: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// EncodeTool is a message's nullable tool column.
func EncodeTool(store, messageID string, tc *host.ToolCall) (*string, error) {
	s, err := NullJSON(tc)
	if err != nil {
		return nil, fmt.Errorf("%s: message %s: encode tool: %w", store, messageID, err)
	}
	return s, nil
}

// OperationArgs encodes a runtime operation's JSON columns.
func OperationArgs(store string, op host.RuntimeOperation) (response string, followUp *string, err error) {
	if response, err = EncodeJSON(op.Response); err != nil {
		return "", nil, fmt.Errorf("%s: runtime operation %s: %w", store, op.ID, err)
	}
	if followUp, err = NullJSON(op.FollowUp); err != nil {
		return "", nil, fmt.Errorf("%s: runtime operation %s: %w", store, op.ID, err)
	}
	return response, followUp, nil
}
