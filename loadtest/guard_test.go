package loadtest

import (
	"strings"
	"testing"
)

func TestCheckLoopback(t *testing.T) {
	ok := []string{
		"127.0.0.1:8080", "localhost:9000", "[::1]:8080", "127.8.9.10:1", "localhost", "::1",
		"http://127.0.0.1:8080", "ws://localhost:1/v1/ws", "redis://127.0.0.1:6379/0",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres:///test",
		"postgres://u@/db?host=/var/run/postgresql",
	}
	for _, target := range ok {
		if err := CheckLoopback(target); err != nil {
			t.Errorf("CheckLoopback(%q) = %v, want nil", target, err)
		}
	}
	bad := []string{
		"10.0.0.1:8080", "192.168.1.5:80", "172.16.0.1:1", "8.8.8.8:53", "example.com:80",
		"0.0.0.0:8080", "[::]:8080", "http://10.1.2.3:8080", "redis://redis.internal:6379",
		"postgres://u@127.0.0.1/db?host=db.example.com", "", "localhost.example.com:80",
	}
	for _, target := range bad {
		err := CheckLoopback(target)
		if err == nil {
			t.Errorf("CheckLoopback(%q) = nil, want a refusal", target)
			continue
		}
		if target != "" && !strings.Contains(err.Error(), "loopback") {
			t.Errorf("CheckLoopback(%q) = %v: the error should say why", target, err)
		}
	}
}
