package sqlstore

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/ensemble-dev/ensemble/host"
)

// Page cuts a result read with LIMIT limit+1 back to limit rows and reports
// whether the extra row showed there is more.
func Page[T any](items []T, limit int) ([]T, bool) {
	if len(items) > limit {
		return items[:limit], true
	}
	return items, false
}

// EncodeCursor is an opaque keyset cursor over (time, id). Each store
// passes its own time unit (PostgreSQL microseconds, SQLite milliseconds),
// so cursors already handed to clients keep decoding.
func EncodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + ":" + id))
}

// DecodeCursor reads a cursor EncodeCursor wrote; anything else is invalid
// input from the client.
func DecodeCursor(c string) (int64, string, error) {
	bad := host.Errorf(host.CodeInvalidInput, "invalid session cursor")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", bad
	}
	at, id, ok := strings.Cut(string(b), ":")
	if !ok {
		return 0, "", bad
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, "", bad
	}
	return n, id, nil
}
