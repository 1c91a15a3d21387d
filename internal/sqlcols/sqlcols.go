// Package sqlcols holds the small SQL text helpers both canonical stores
// (sqlite and pg) use, so the adapters do not import each other.
package sqlcols

// Prefixed qualifies a comma-separated column list with a table alias
// ("a, b" with "i." becomes "i.a, i.b").
func Prefixed(alias, cols string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\t' && c != '\n' {
			out = append(out, alias...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}
