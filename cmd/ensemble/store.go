package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// sqlitePath resolves the embedded database file from --database-url and
// --data-dir. Other stores are refused with a clear message.
func sqlitePath(dbURL, dataDir string) (string, error) {
	switch {
	case dbURL == "":
		return filepath.Join(dataDir, "ensemble.db"), nil
	case strings.HasPrefix(dbURL, "sqlite://"):
		return strings.TrimPrefix(dbURL, "sqlite://"), nil
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return "", fmt.Errorf("this build has no PostgreSQL store yet; leave --database-url empty for embedded SQLite")
	}
	return "", fmt.Errorf("unsupported --database-url %q: use sqlite://PATH or leave it empty", redactURL(dbURL))
}

// redactURL drops credentials before a URL is shown.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "…@" + u[at+1:]
		}
	}
	return u
}
