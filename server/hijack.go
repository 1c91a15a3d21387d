package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/ensemble-dev/ensemble/hub"
)

// readBufSize is a connection's read buffer: client frames are small and
// rare, and a larger read goes past the buffer into the caller's slice.
const readBufSize = 256

// smallHijack is the ResponseWriter handed to websocket.Accept. Its
// Hijack replaces net/http's 4 KiB read and write buffers, which the
// library would otherwise keep for the connection's whole life, with a
// small read buffer and a hub.SocketWire that only holds memory while it
// writes.
type smallHijack struct {
	http.ResponseWriter
	wire *hub.SocketWire
	// socket and reader let the hub poll an idle connection's socket for
	// readiness instead of parking a goroutine in Read (plain TCP only).
	socket syscall.Conn
	reader *bufio.Reader
	drain  *hub.SocketReader
}

func (w *smallHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{}) // the HTTP read and write timeouts end with the upgrade
	sr := hub.NewSocketReader(nc)
	br := bufio.NewReaderSize(sr, readBufSize)
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent right after the upgrade request: the
		// library takes over what the reader has buffered, so they must be
		// buffered in ours (a bytes.Reader fills exactly n on the first read).
		b, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(b)), sr), max(n, readBufSize))
		if _, err := br.Peek(n); err != nil {
			return nil, nil, err
		}
	}
	w.wire = hub.NewSocketWire(nc)
	if tc, ok := nc.(*net.TCPConn); ok { // not TLS: a tls.Conn buffers what it decrypted
		w.socket, w.reader, w.drain = tc, br, sr
	}
	// 16 bytes is bufio's minimum; writes larger than that pass through to the wire.
	// The library reads the returned conn (it resets br onto it): the
	// SocketReader must be it for the hub to see what each read left.
	return sr, bufio.NewReadWriter(br, bufio.NewWriterSize(w.wire, 16)), nil
}
