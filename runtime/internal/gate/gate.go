// Package gate holds back an ACP connection's input until the connection
// is configured. acp-go-sdk starts its reader goroutines inside
// NewClientSideConnection/NewAgentSideConnection, and SetLogger writes a
// field those goroutines read without synchronization; reading nothing
// until Open is called orders SetLogger before any use of the logger.
package gate

import "io"

// Reader passes reads through once Open was called.
type Reader struct {
	r    io.Reader
	open chan struct{}
}

// New returns a closed gate in front of r.
func New(r io.Reader) *Reader { return &Reader{r: r, open: make(chan struct{})} }

// Open lets reads through. Call it once.
func (g *Reader) Open() { close(g.open) }

func (g *Reader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
