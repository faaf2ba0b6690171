package xdsconfig

import "time"

// connState is what the log last said of the connection, so that it
// speaks once per change of state, not once per attempt.
type connState struct {
	up       bool // the current stream has brought a response
	failing  bool // a failure was logged, and no response came since
	failures int  // attempts failed in a row
}

// streamUp notes the first response of a stream.
func (c *Client) streamUp() {
	s := &c.state
	switch {
	case s.failing:
		c.o.Log.Info("xDS control plane reached again; following its rate-limit configuration", "server", c.o.Server, "failed_attempts", s.failures)
	case !s.up:
		c.o.Log.Info("following the rate-limit configuration of the xDS control plane", "server", c.o.Server, "node", c.node.GetId())
	}
	*s = connState{up: true}
	c.m.connected.Set(1)
}

// streamFailed notes a stream that ended, or could not be opened, with
// err; the next attempt is in wait.
func (c *Client) streamFailed(err error, wait time.Duration) {
	s := &c.state
	s.failures++
	c.m.connected.Set(0)
	switch {
	case s.up:
		c.o.Log.Warn("xDS stream ended; the last rate-limit configuration stays in use; connecting again", "server", c.o.Server, "err", err, "retry_in", wait.String())
	case !s.failing:
		c.o.Log.Warn("cannot get the rate-limit configuration from the xDS control plane; the last one, if any, stays in use; retrying with backoff", "server", c.o.Server, "err", err, "retry_in", wait.String())
	default:
		c.o.Log.Debug("xDS control plane still unreachable", "server", c.o.Server, "err", err, "attempts", s.failures, "retry_in", wait.String())
	}
	s.up, s.failing = false, true
}
