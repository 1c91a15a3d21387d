package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

func TestTrashRetentionFlag(t *testing.T) {
	c, err := parseServe(nil, &bytes.Buffer{})
	if err != nil || c.trash.retention != host.DefaultTrashRetention || c.trash.interval != time.Hour {
		t.Fatalf("defaults: %+v %v", c.trash, err)
	}
	t.Setenv("ENSEMBLE_TRASH_RETENTION", "72h")
	if c, err = parseServe(nil, &bytes.Buffer{}); err != nil || c.trash.retention != 72*time.Hour {
		t.Fatalf("environment: %+v %v", c.trash, err)
	}
	if c, err = parseServe([]string{"--trash-retention", "0"}, &bytes.Buffer{}); err != nil || c.trash.retention != 0 {
		t.Fatalf("0 disables retention: %+v %v", c.trash, err)
	}
	for _, bad := range [][]string{{"--trash-retention", "-1h"}, {"--trash-purge-interval", "0"}} {
		if _, err := parseServe(bad, &bytes.Buffer{}); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}
