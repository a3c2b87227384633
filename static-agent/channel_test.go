package main

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"toolrt/agent/protocol"
)

// daemonSide reads frames from the agent's connection.
type daemonSide struct {
	t       *testing.T
	conn    net.Conn
	decoder protocol.Decoder
	frames  []*protocol.Frame
}

func (d *daemonSide) send(m protocol.Message, id, epoch int64) {
	frame, err := protocol.Encode(m, id, epoch, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.conn.Write(frame); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemonSide) next() *protocol.Frame {
	buf := make([]byte, 1<<16)
	for len(d.frames) == 0 {
		_ = d.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := d.conn.Read(buf)
		if err != nil {
			d.t.Fatalf("reading the agent: %v", err)
		}
		frames, err := d.decoder.Feed(buf[:n])
		if err != nil {
			d.t.Fatal(err)
		}
		d.frames = append(d.frames, frames...)
	}
	frame := d.frames[0]
	d.frames = d.frames[1:]
	return frame
}

// pinged proves the agent serves this connection: a ping of the daemon's epoch is answered.
func (d *daemonSide) pinged(epoch int64) {
	hello := protocol.NewHello()
	d.send(&hello, 1, epoch)
	if op := d.next().Op; op != "hello_reply" {
		d.t.Fatalf("answered %q to hello", op)
	}
	ping := protocol.NewPing()
	d.send(&ping, 2, epoch)
	if op := d.next().Op; op != "pong" {
		d.t.Fatalf("answered %q to ping", op)
	}
}

func accept(t *testing.T, path string) (net.Listener, func() *daemonSide) {
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return listener, func() *daemonSide {
		conn, err := listener.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return &daemonSide{t: t, conn: conn}
	}
}

// The token comes in the first frame; a SIGUSR1 with nobody listening keeps
// the connection; with a new daemon listening the agent presents the token,
// then its Resync, and serves the new connection.
func TestTheChannelKeepsItsConnectionUntilADaemonListens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	listener, next := accept(t, path)
	a := &Agent{ch: &channel{path: path}, calls: map[int64]*Call{}, kept: newKept()}
	go a.serveChannel()
	first := next()
	token := protocol.NewChannel()
	token.Token = "secret-token"
	first.send(&token, 0, 0)
	first.pinged(7)
	_ = listener.Close() // unlinks the socket: nobody listens

	a.redial()
	first.pinged(8)

	listener, next = accept(t, path)
	defer listener.Close()
	go a.redial()
	second := next()
	presented := second.next()
	m, err := presented.Message()
	if err != nil || presented.Op != "channel" || m.(*protocol.Channel).Token != "secret-token" {
		t.Fatalf("presented %q %v", presented.Op, err)
	}
	if op := second.next().Op; op != "resync" {
		t.Fatalf("then %q, not resync", op)
	}
	second.pinged(9)
}
