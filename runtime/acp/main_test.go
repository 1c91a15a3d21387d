package acp_test

import (
	"fmt"
	"os"
	"testing"
)

// testDir holds files shared by the tests of this package, such as the
// example agent binary; parallel tests outlive any one t.TempDir.
var testDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "ensemble-acp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	code := m.Run()
	_ = os.RemoveAll(d)
	os.Exit(code)
}
