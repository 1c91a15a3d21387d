package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// simAgent serves the sim agent as an ACP agent on stdin/stdout; logs go to
// stderr so they never mix with the protocol stream.
func simAgent(ctx context.Context, args []string, stderr io.Writer) error {
	f := newFlags("sim-agent", "Run the built-in sim agent (simulated, no model) as an ACP agent on stdio.", stderr)
	rate := f.duration("rate", "ENSEMBLE_SIM_RATE", 0, "delay between streamed chunks (default 15ms; negative: none)")
	scenario := f.string("scenario", "ENSEMBLE_SIM_SCENARIO", "", "JSON scenario file that replaces the default answer")
	stateDir := f.string("state-dir", "ENSEMBLE_SIM_STATE_DIR", "", "directory that keeps sessions across restarts, one file each, so session/load works after a restart (default: none, sessions live in memory)")
	if err := f.parse(args); err != nil {
		return err
	}
	opts, err := simOptions(*rate, *scenario, *stateDir, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	return sim.Serve(ctx, os.Stdin, os.Stdout, opts)
}

func simOptions(rate time.Duration, scenarioPath, stateDir string, log *slog.Logger) (sim.Options, error) {
	opts := sim.Options{Rate: rate, Logger: log, StateDir: stateDir}
	if scenarioPath != "" {
		sc, err := sim.LoadScenario(scenarioPath)
		if err != nil {
			return opts, err
		}
		opts.Scenario = sc
	}
	return opts, nil
}
