package loadtest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckLoopback refuses any target that is not on this machine's loopback
// interface. target is host:port, a bare host, or a URL (http, ws, redis,
// postgres…). Only "localhost", 127.0.0.0/8 and ::1 are accepted; names are
// not resolved (a name other than localhost is refused), and a PostgreSQL
// URL may also name a Unix socket directory.
func CheckLoopback(target string) error {
	host, err := targetHost(target)
	if err != nil {
		return err
	}
	if isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("refusing target %q: %q is not a loopback address; ensemble loadtest only drives servers on this machine (localhost, 127.0.0.0/8 or [::1])", target, host)
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// targetHost extracts the host of a target.
func targetHost(target string) (string, error) {
	t := strings.TrimSpace(target)
	if t == "" {
		return "", fmt.Errorf("empty target")
	}
	if strings.Contains(t, "://") {
		u, err := url.Parse(t)
		if err != nil {
			return "", fmt.Errorf("target %q: %w", target, err)
		}
		h := u.Hostname()
		if h == "" && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
			// libpq defaults to a Unix socket, or names one in ?host=.
			h = u.Query().Get("host")
			if h == "" || strings.HasPrefix(h, "/") {
				return "localhost", nil
			}
		}
		if h == "" {
			return "", fmt.Errorf("target %q has no host", target)
		}
		if hs := u.Query().Get("host"); hs != "" && !strings.HasPrefix(hs, "/") && !isLoopbackHost(hs) {
			return hs, nil // a host= parameter overrides the URL's host in libpq
		}
		return h, nil
	}
	if h, _, err := net.SplitHostPort(t); err == nil {
		return h, nil
	}
	return t, nil
}
