//go:build !linux

package hub

import "errors"

// poller is Linux-only (epoll); elsewhere every connection keeps a reader
// goroutine.
type poller struct{}

type pollReg struct{}

func newPoller() (*poller, error) { return nil, errors.New("readiness polling needs Linux") }

func (p *poller) canPoll(*Conn) bool   { return false }
func (p *poller) register(*Conn) error { return errors.New("readiness polling needs Linux") }
func (p *poller) add(*Conn) error      { return errors.New("readiness polling needs Linux") }
func (p *poller) hasBytes(*Conn) bool  { return true }
func (p *poller) forget(*Conn)         {}
func (p *poller) run()                 {}
func (p *poller) close()               {}
