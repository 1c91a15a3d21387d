package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

var errHelp = errors.New("help shown")

// flags is a FlagSet whose every flag falls back to an environment variable;
// an explicit flag wins over the environment.
type flags struct {
	*flag.FlagSet
	// envErrs holds bad environment values by flag name; an explicit flag
	// overrides (and so excuses) its variable.
	envErrs map[string]error
}

func newFlags(name, summary string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ensemble %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.PrintDefaults()
	}
	return &flags{FlagSet: fs}
}

func (f *flags) string(name, env, def, help string) *string {
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	return f.String(name, def, help+" (env "+env+")")
}

func (f *flags) bool(name, env string, def bool, help string) *bool {
	if v, ok := os.LookupEnv(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.envErr(name, fmt.Errorf("%s: %q is not a boolean", env, v))
		}
		def = b
	}
	return f.Bool(name, def, help+" (env "+env+")")
}

func (f *flags) duration(name, env string, def time.Duration, help string) *time.Duration {
	if v, ok := os.LookupEnv(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			f.envErr(name, fmt.Errorf("%s: %q is not a duration (like 15ms or 2s)", env, v))
		}
		def = d
	}
	return f.Duration(name, def, help+" (env "+env+")")
}

func (f *flags) envErr(name string, err error) {
	if f.envErrs == nil {
		f.envErrs = map[string]error{}
	}
	f.envErrs[name] = err
}

func (f *flags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return err
	}
	f.Visit(func(fl *flag.Flag) { delete(f.envErrs, fl.Name) })
	for _, err := range f.envErrs {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", f.Arg(0))
	}
	return nil
}
