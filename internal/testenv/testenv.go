// Package testenv tells tests where the external services are and what to do
// when one is missing: skip with a clear message, or fail when
// ENSEMBLE_REQUIRE_SERVICES=1 (as .ci/run sets it).
package testenv

import (
	"os"
	"testing"
)

// Required reports whether missing services must fail tests.
func Required() bool { return os.Getenv("ENSEMBLE_REQUIRE_SERVICES") == "1" }

// Missing skips the test because a service is unavailable, or fails it when
// services are required.
func Missing(t testing.TB, service string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required (ENSEMBLE_REQUIRE_SERVICES=1) but unavailable: %v", service, err)
	}
	t.Skipf("%s unavailable, skipping (set ENSEMBLE_REQUIRE_SERVICES=1 to fail instead): %v", service, err)
}

// PostgresURL is the PostgreSQL server tests use: ENSEMBLE_TEST_DATABASE_URL
// or the loopback default with trust auth.
func PostgresURL() string {
	if u := os.Getenv("ENSEMBLE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is the Redis server tests use: ENSEMBLE_TEST_REDIS_URL or the
// loopback default.
func RedisURL() string {
	if u := os.Getenv("ENSEMBLE_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// ChromiumPath is Debian's Chromium, or ENSEMBLE_TEST_CHROMIUM.
func ChromiumPath() string {
	if p := os.Getenv("ENSEMBLE_TEST_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}
