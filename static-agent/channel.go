package main

// The channel: the protocol on a unix socket the agent dials (`--channel
// PATH`, set by the Docker backend) instead of the container's stdin and
// stdout. Under gVisor root in the sandbox can reopen the container's stdio
// pipes through /proc/1/fd (their owner is the host's root); a socket there
// cannot be opened at all (ENXIO), so nothing in the sandbox reads or forges
// what the daemon and the agent say.
//
// At start the agent dials PATH once: the daemon listens only until it takes
// that first connection, and its first frame is a Channel with a token the
// daemon keeps outside the sandbox. After a daemon restart the new daemon
// listens again and sends SIGUSR1; the agent dials and presents the token
// (then its Resync), and the daemon takes only the connection presenting
// it. The token lives in the agent's memory alone (not its argv, environ or
// files), which is not dumpable.

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"toolrt/agent/protocol"
)

type channel struct {
	path  string
	mu    sync.Mutex // guards conn and token
	conn  *net.UnixConn
	token string
}

// channelPath is PATH of `--channel PATH`, "" when the agent speaks on stdio.
func channelPath(args []string) string {
	if len(args) == 3 && args[1] == "--channel" {
		return args[2]
	}
	return ""
}

func (c *channel) current() *net.UnixConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

// swap makes conn the connection frames go to; the previous one.
func (c *channel) swap(conn *net.UnixConn) *net.UnixConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.conn
	c.conn = conn
	return old
}

// ended forgets conn if it is still the current connection.
func (c *channel) ended(conn *net.UnixConn) {
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.mu.Unlock()
	_ = conn.Close()
}

// write sends one frame on the current connection (under the agent's
// sendMu); with none (the daemon is gone) it is dropped: a call's result is
// kept until acknowledged and given again to the next daemon.
func (c *channel) write(frame []byte) {
	if conn := c.current(); conn != nil {
		_, _ = conn.Write(frame)
	}
}

// serveChannel dials the daemon, takes the token from its first frame and
// serves that connection; once it ends (the daemon went away) calls keep
// running and the agent waits for SIGUSR1 to dial again (redial).
func (a *Agent) serveChannel() {
	conn, err := dialPatiently(a.ch.path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolrt-agent: dialing %s: %v\n", a.ch.path, err)
		os.Exit(1)
	}
	a.ch.swap(conn)
	a.readConn(conn, true)
	a.ch.mu.Lock()
	token := a.ch.token
	a.ch.mu.Unlock()
	if token == "" {
		os.Exit(1) // never told its token: no daemon could re-adopt it
	}
	select {}
}

// redial answers SIGUSR1: dial, present the token, then Resync. When nobody
// listens (a SIGUSR1 sent from inside the sandbox) the current connection
// stays; when a daemon does, it is a new daemon and its connection replaces
// the old one.
func (a *Agent) redial() {
	a.ch.mu.Lock()
	token := a.ch.token
	a.ch.mu.Unlock()
	if token == "" {
		return // still starting: the first connection is not served yet
	}
	// Waiting while the backlog is full: root may flood the socket.
	conn, err := dialPatiently(a.ch.path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolrt-agent: SIGUSR1 but no daemon listens: %v\n", err)
		return
	}
	hello := protocol.NewChannel()
	hello.Token = token
	first, _ := protocol.Encode(&hello, 0, 0, nil)
	resync := protocol.NewResync()
	resync.Pid = int64(os.Getpid())
	second, _ := protocol.Encode(&resync, 0, 0, nil)
	a.sendMu.Lock()
	old := a.ch.swap(conn)
	_, err = conn.Write(append(first, second...))
	a.sendMu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	if err != nil {
		a.ch.ended(conn)
		return
	}
	go a.readConn(conn, false)
}

// readConn decodes and dispatches one connection's frames until it ends.
// With `first`, its first frame must be the daemon's Channel (the token).
func (a *Agent) readConn(conn *net.UnixConn, first bool) {
	defer a.ch.ended(conn)
	var decoder protocol.Decoder
	buf := make([]byte, 1<<20)
	for {
		n, err := conn.Read(buf)
		for _, frame := range decodeAll(&decoder, buf[:n]) {
			if first {
				if !a.takeToken(frame) {
					return
				}
				first = false
				continue
			}
			a.dispatch(frame)
		}
		if err != nil {
			return
		}
	}
}

func (a *Agent) takeToken(frame *protocol.Frame) bool {
	m, err := frame.Message()
	hello, ok := m.(*protocol.Channel)
	if err != nil || !ok || hello.Token == "" {
		fmt.Fprintf(os.Stderr, "toolrt-agent: the channel's first frame is %q, not its token\n", frame.Op)
		return false
	}
	a.ch.mu.Lock()
	a.ch.token = hello.Token
	a.ch.mu.Unlock()
	return true
}

// nullStdio points fds 0 and 1 at /dev/null: on the channel they carry nothing.
func nullStdio() {
	null, err := syscall.Open("/dev/null", syscall.O_RDWR, 0)
	if err == nil {
		_ = syscall.Dup3(null, 0, 0)
		_ = syscall.Dup3(null, 1, 0)
		_ = syscall.Close(null)
	}
}
