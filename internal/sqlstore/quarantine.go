package sqlstore

import (
	"errors"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Decoded is a recovery scan's result: the records that decoded and the
// quarantine candidates, so one poisoned record never stalls the rest.
type Decoded[T any] struct {
	Records []T
	Bad     []host.Quarantined
}

// Collector reads a recovery scan's rows.
type Collector[T any] = func(Rows) (Decoded[T], error)

// JSONRecords reads rows of (workspace_id, key, JSON document) and decodes
// each with decode; a record that does not decode becomes a quarantine
// candidate of kind, keyed "<workspace>/<key>".
func JSONRecords[T any](kind string, decode func(ws, key, raw string) (T, error)) Collector[T] {
	return func(rows Rows) (Decoded[T], error) { return decodeRecords(rows, kind, decode) }
}

func decodeRecords[T any](rows Rows, kind string, decode func(ws, key, raw string) (T, error)) (Decoded[T], error) {
	d := Decoded[T]{Records: []T{}}
	for rows.Next() {
		var ws, key, raw string
		if err := rows.Scan(&ws, &key, &raw); err != nil {
			return d, err
		}
		v, err := decode(ws, key, raw)
		if err != nil {
			d.Bad = append(d.Bad, host.Quarantined{WorkspaceID: ws, Kind: kind,
				Key: ws + "/" + key, Reason: err.Error(), At: time.Now().UTC()})
			continue
		}
		d.Records = append(d.Records, v)
	}
	return d, rows.Err()
}

// Decodable reads every row with a row codec; a row the codec rejects
// with a *DecodeError becomes a quarantine candidate of kind under the
// workspace and quarantine key that key names (the codec fills the key
// columns first), and any other error ends the scan.
func Decodable[T any](scan func(Scanner) (T, error), kind string, key func(T) (ws, key string)) Collector[T] {
	return func(rows Rows) (Decoded[T], error) { return collectDecodable(rows, scan, kind, key) }
}

func collectDecodable[T any](rows Rows, scan func(Scanner) (T, error), kind string, key func(T) (ws, key string)) (Decoded[T], error) {
	d := Decoded[T]{Records: []T{}}
	for rows.Next() {
		v, err := scan(rows)
		var de *DecodeError
		if errors.As(err, &de) {
			ws, k := key(v)
			d.Bad = append(d.Bad, host.Quarantined{WorkspaceID: ws, Kind: kind,
				Key: k, Reason: err.Error(), At: time.Now().UTC()})
			continue
		}
		if err != nil {
			return d, err
		}
		d.Records = append(d.Records, v)
	}
	return d, rows.Err()
}
