package loadtest

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

// sourceAddrs is how many loopback source addresses (127.0.0.1 …
// 127.0.0.sourceAddrs) the harness's clients rotate over. One source
// address gives about 28,000 ephemeral ports per destination (Linux's
// default ip_local_port_range), and closed connections linger in
// TIME_WAIT; sixteen keep tens of thousands of connections and a
// reconnect storm clear of that limit.
const sourceAddrs = 16

var (
	sourceClients [sourceAddrs]*http.Client
	sourceNext    atomic.Uint32
)

func init() {
	for k := range sourceAddrs {
		d := &net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(k+1))}}
		sourceClients[k] = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if h, _, err := net.SplitHostPort(addr); err == nil {
					if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() || ip.To4() == nil {
						// Not IPv4 loopback (CheckLoopback allowed it): no
						// source address can be chosen in 127.0.0.0/8.
						return (&net.Dialer{Timeout: d.Timeout}).DialContext(ctx, network, addr)
					}
				}
				return d.DialContext(ctx, network, addr)
			},
			// Upgraded connections leave the pool; nothing else is kept.
			MaxIdleConnsPerHost: -1,
		}}
	}
}

// sourceClient is the next client in the rotation over the source
// addresses.
func sourceClient() *http.Client {
	return sourceClients[sourceNext.Add(1)%sourceAddrs]
}

// raiseNoFile raises this process's soft open-file limit to its hard
// limit (children inherit it) and returns the new soft limit.
func raiseNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}
