package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/xdsconfig"
)

// openXDS, with CONFIG_TYPE=GRPC_XDS_SOTW, follows the RateLimitConfig
// resources of the xDS control plane (xdsconfig) until close. Lookups then
// see them over the descriptor files: a domain the control plane describes
// replaces the files' same domain whole (logged once per domain), and
// a.current stays nil until either has loaded. As the reference, serving
// waits for the control plane's first response, unless
// FORCE_START_WITHOUT_INITIAL_CONFIG.
func (a *app) openXDS(ctx context.Context) error {
	x := &a.cfg.XDS
	if !x.on() {
		return nil
	}
	res, err := a.reservationOverlay()
	if err != nil {
		return err
	}
	c, err := xdsconfig.New(xdsconfig.Options{
		Server: x.ServerURL, NodeID: x.NodeID, NodeMetadata: x.NodeMetadata, Headers: x.Headers, TLS: a.xdsTLS,
		MaxRecvMsgSize: x.MaxMsgSize, ConnectTimeout: x.ConnectTimeout, Backoff: x.Backoff, Reservations: res,
		Load: descriptors.Options{MergeDomains: a.cfg.MergeDomains, MaxReservationTTL: a.cfg.MaxReservationTTL, GlobalScope: a.cfg.GlobalScope()}, Log: a.log, Registerer: a.reg,
		OnLoad: a.onConfigLoad(), // the reference's config_load_success and _error
	})
	if err != nil {
		return fmt.Errorf("CONFIG_TYPE=%s: %w", configTypeXDS, err)
	}
	layers := descriptors.NewLayers(c.Current, a.current, func(domains []string) {
		a.log.Warn("the xDS configuration describes domains the descriptor files describe too; the xDS ones are used", "domains", domains)
	})
	a.current = layers.Current
	a.goBG("xds", c.Run)
	if a.cfg.ForceStart {
		a.log.Info("serving before the first xDS configuration (FORCE_START_WITHOUT_INITIAL_CONFIG)", "server", redactURL(x.ServerURL), "node", x.NodeID)
		return nil
	}
	return a.waitForXDS(ctx, c)
}

// reservationOverlay reads RESERVATION_OVERLAY, if set.
func (a *app) reservationOverlay() (*xdsconfig.Reservations, error) {
	path := a.cfg.XDS.ReservationOverlay
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("RESERVATION_OVERLAY: %w", err)
	}
	res, err := xdsconfig.ParseReservations(path, data, a.cfg.MaxReservationTTL)
	if err != nil {
		return nil, fmt.Errorf("RESERVATION_OVERLAY: %w", err)
	}
	a.log.Info("reservation overlay read", "file", path, "entries", len(res.Entries))
	return res, nil
}

// xdsWaitReminder is how often a server waiting for its first xDS
// configuration says it still does.
const xdsWaitReminder = 30 * time.Second

// waitForXDS waits for the control plane's first response, loaded or
// refused, as the reference waits for its first configuration event; it
// says so when it starts, and every xdsWaitReminder until it ends.
func (a *app) waitForXDS(ctx context.Context, c *xdsconfig.Client) error {
	x := &a.cfg.XDS
	a.log.Info("waiting for the first xDS configuration before serving (FORCE_START_WITHOUT_INITIAL_CONFIG=true serves at once)", "server", redactURL(x.ServerURL), "node", x.NodeID)
	t := time.NewTicker(xdsWaitReminder)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-c.Received():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			a.log.Warn("still waiting for the first xDS configuration before serving", "server", redactURL(x.ServerURL), "node", x.NodeID, "waited", time.Since(start).Round(time.Second).String())
		}
	}
}
