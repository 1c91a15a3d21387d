package loadtest

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress prints one status line about every second: rewritten in place
// on a terminal, a new line every five seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	line  func() string
	start time.Time
	quit  chan struct{}
	done  chan struct{}
	last  int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	if w == nil {
		close(p.done)
		return p
	}
	go p.loop()
	return p
}

func (p *progress) set(f func() string) {
	p.mu.Lock()
	p.line = f
	p.mu.Unlock()
}

func (p *progress) loop() {
	defer close(p.done)
	every := time.Second
	if !p.tty {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.print(false)
		case <-p.quit:
			p.print(true)
			return
		}
	}
}

func (p *progress) print(final bool) {
	p.mu.Lock()
	f := p.line
	p.mu.Unlock()
	if f == nil {
		return
	}
	s := fmt.Sprintf("[%5.0fs] %s", time.Since(p.start).Seconds(), f())
	if p.tty {
		pad := ""
		if n := p.last - len(s); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		p.last = len(s)
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(p.w, "\r%s%s%s", s, pad, end)
		return
	}
	if !final {
		fmt.Fprintln(p.w, s)
	}
}

func (p *progress) stop() {
	if p.w == nil {
		return
	}
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}
