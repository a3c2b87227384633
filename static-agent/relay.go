package main

// The sandbox's end of network egress: the agent,
// root, listens on 127.0.0.1:3128 in the container's own network namespace
// and pipes each connection, byte for byte, to the unix socket the
// daemon's proxy for this session listens on, in a directory the sandbox
// user cannot enter. All policy is the proxy's; the relay reads nothing.
// The socket is dialled per connection, so a daemon that restarts and
// listens anew is reached without restarting the relay; while nothing
// listens, clients get a 502 that says so.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"toolrt/agent/protocol"
)

const (
	// Connections relayed at once; the proxy has its own, lower, per-session cap.
	relayMaxClients = 1024
	// How long a connection waits while the proxy's accept queue is full.
	relayPatience = 5 * time.Second
	unavailable   = "toolrt: this session's network proxy is not reachable right now " +
		"(the daemon may be restarting); retry in a few seconds\n"
)

type relay struct {
	socket  string
	port    int64
	mu      sync.Mutex
	clients int
}

var (
	relayMu sync.Mutex
	running *relay
)

func init() {
	handle("relay_start", func(a *Agent, frame *protocol.Frame, m protocol.Message) {
		request := m.(*protocol.RelayStart)
		relayMu.Lock()
		defer relayMu.Unlock()
		if r := running; r != nil {
			if r.socket != request.Socket || r.port != request.Port {
				a.fail(frame.ID, protocol.InvalidArguments,
					fmt.Sprintf("the relay already runs on port %d to %s", r.port, r.socket))
				return
			}
			a.relayReady(frame.ID, r.port)
			return
		}
		dir := path.Dir(request.Socket)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			a.fail(frame.ID, protocol.NotFound, dir+": no relay directory in this sandbox")
			return
		}
		listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", request.Port))
		if err != nil {
			a.fail(frame.ID, protocol.Internal,
				fmt.Sprintf("cannot listen on 127.0.0.1:%d: %v", request.Port, err))
			return
		}
		running = &relay{socket: request.Socket, port: request.Port}
		go running.serve(listener)
		a.relayReady(frame.ID, request.Port)
	})
}

func (a *Agent) relayReady(id, port int64) {
	reply := protocol.NewRelayReady()
	reply.Port = port
	a.send(&reply, id, nil)
}

func (r *relay) serve(listener net.Listener) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		r.mu.Lock()
		full := r.clients >= relayMaxClients
		if !full {
			r.clients++
		}
		r.mu.Unlock()
		if full {
			_ = conn.Close()
			continue
		}
		go func() {
			defer func() {
				r.mu.Lock()
				r.clients--
				r.mu.Unlock()
			}()
			r.join(conn.(*net.TCPConn))
		}()
	}
}

// join pipes one client to the proxy: the client ending its sending
// half-closes the proxy's side, whose answer still comes; the proxy ending
// ends both.
func (r *relay) join(client *net.TCPConn) {
	defer client.Close()
	proxy, err := dialPatiently(r.socket)
	if err != nil {
		_, _ = client.Write([]byte(fmt.Sprintf("HTTP/1.1 502 Bad Gateway\r\n"+
			"Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"+
			"Connection: close\r\n\r\n%s", len(unavailable), unavailable)))
		return
	}
	defer proxy.Close()
	go func() {
		_, _ = io.Copy(proxy, client)
		_ = proxy.CloseWrite()
	}()
	_, _ = io.Copy(client, proxy)
}

// dialPatiently connects to the unix socket, waiting while its backlog is full.
func dialPatiently(socket string) (*net.UnixConn, error) {
	until := time.Now().Add(relayPatience)
	for {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(until) {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
