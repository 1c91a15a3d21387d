// Command ensemble is the only main: it wires the Host to its adapters.
//
//	ensemble serve       run the server (embedded SQLite, sim agent by default)
//	ensemble migrate     apply or show schema migrations
//	ensemble token       mint a sign-in token for local use
//	ensemble sim-agent   run the built-in sim agent as an ACP agent on stdio
//	ensemble loadtest    load-test replicas on loopback (see loadtest/)
//	ensemble export      write a settled session graph as portable JSON
//	ensemble import      restore a session graph into a workspace
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Ensemble: a real-time collaboration server for AI coding agents.

Usage:
  ensemble serve [flags]       run the server (see ensemble serve --help)
  ensemble migrate up|status   apply or show database migrations
  ensemble token [flags]       mint a sign-in token for local use
  ensemble sim-agent [flags]   run the built-in sim agent over stdio (ACP)
  ensemble loadtest [flags]    measure replicas on loopback against reference servers
  ensemble export --session ID write a settled session graph as portable JSON
  ensemble import --user U     restore a session graph into a workspace (no agent starts)

Every flag can also be set by the environment variable named in its help;
the flag wins.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = migrate(ctx, args[1:], stdout, stderr)
	case "token":
		err = token(args[1:], stdout, stderr)
	case "sim-agent":
		err = simAgent(ctx, args[1:], stderr)
	case "loadtest":
		err = loadtestCmd(ctx, args[1:], stdout, stderr)
	case "export":
		err = exportCmd(ctx, args[1:], stdout, stderr)
	case "import":
		err = importCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ensemble: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == errHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ensemble %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
