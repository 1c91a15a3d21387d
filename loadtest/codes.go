package loadtest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// codeCounter counts errors by wire code (or "transport").
type codeCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func newCodeCounter() *codeCounter { return &codeCounter{n: map[string]int64{}} }

func (c *codeCounter) add(err error) {
	code := "transport"
	var we *WireError
	if errors.As(err, &we) {
		code = we.Code
	} else if errors.Is(err, ErrClosed) {
		code = "closed"
	}
	c.mu.Lock()
	c.n[code]++
	c.mu.Unlock()
}

func (c *codeCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for k, v := range c.n {
		parts = append(parts, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
