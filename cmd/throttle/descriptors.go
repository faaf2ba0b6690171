package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/restapi"
)

// runtimeSettings are the config folder of the reference service, beside
// DESCRIPTORS_DIR: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
// read as the reference reads it (descriptors.Options.Tree).
var runtimeSettings = []setting{
	{env: "RUNTIME_ROOT", flag: "runtime-root", ref: runtimeUpstream("/srv/runtime_data/current"),
		usage: "the reference service's config folder is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY: every file " +
			"in it, at any depth, is descriptor YAML (reloaded on change, a ConfigMap's ..data swap too); empty = " +
			"/srv/runtime_data/current, the reference's, when RUNTIME_SUBDIRECTORY is set, else no such folder; not with " +
			"DESCRIPTORS_DIR",
		set: func(c *config, v string) error { c.Runtime.Root = v; return nil }},
	{env: "RUNTIME_SUBDIRECTORY", flag: "runtime-subdirectory", ref: runtimeUpstream(""),
		usage: "the folder under RUNTIME_ROOT holding RUNTIME_APPDIRECTORY (Istio's sample: ratelimit)",
		set:   func(c *config, v string) error { c.Runtime.Subdirectory = v; return nil }},
	{env: "RUNTIME_APPDIRECTORY", flag: "runtime-appdirectory", def: "config", ref: runtimeUpstream("config"),
		usage: "the folder of descriptor files under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY",
		set:   func(c *config, v string) error { c.Runtime.AppDirectory = v; return nil }},
	{env: "RUNTIME_IGNOREDOTFILES", flag: "runtime-ignoredotfiles", def: "false", ref: runtimeUpstream("false"),
		usage: "skip files and folders of the config folder whose names start with '.' (those starting with '..', a ConfigMap " +
			"volume's own, are always skipped)",
		set: func(c *config, v string) (err error) { c.Runtime.IgnoreDotFiles, err = parseBool(v); return }},
	{env: "RUNTIME_WATCH_ROOT", flag: "runtime-watch-root", def: "true", ref: upstreamInert("true", watchedAnyway),
		usage: "accepted without effect (named in the log at start): " + watchedAnyway,
		set:   func(c *config, v string) error { _, err := parseBool(v); return err }},
}

// watchedAnyway is why RUNTIME_WATCH_ROOT changes nothing.
const watchedAnyway = "it says which path the reference watches for changes; Throttle reads the config folder's contents " +
	"every DESCRIPTORS_RELOAD_INTERVAL whatever it says, so a symlink swap of RUNTIME_ROOT, a ConfigMap's ..data swap and " +
	"a file edited in place are all applied"

// runtimeUpstream is a RUNTIME_* setting of the reference: it applies with
// CONFIG_TYPE=FILE, and changes nothing with GRPC_XDS_SOTW, whose
// descriptors come from the control plane (Envoy Gateway sets both).
func runtimeUpstream(def string) upstream {
	return upstream{named: true, def: def, inert: func(c *config) string {
		if c.XDS.Type == configTypeXDS {
			return "with CONFIG_TYPE=GRPC_XDS_SOTW the descriptors come from the control plane"
		}
		return ""
	}}
}

// runtimeConfig is the reference service's config folder settings.
type runtimeConfig struct {
	Root, Subdirectory, AppDirectory string
	IgnoreDotFiles                   bool
}

// referenceRuntimeRoot is the reference's RUNTIME_ROOT default.
const referenceRuntimeRoot = "/srv/runtime_data/current"

// folder is the config folder, or "" when neither RUNTIME_ROOT nor
// RUNTIME_SUBDIRECTORY is set.
func (r runtimeConfig) folder() string {
	if r.Root == "" && r.Subdirectory == "" {
		return ""
	}
	root := r.Root
	if root == "" {
		root = referenceRuntimeRoot
	}
	return filepath.Join(root, r.Subdirectory, r.AppDirectory)
}

// runtimeFolder is the reference's config folder, read only with its
// file config source (CONFIG_TYPE=FILE), as the reference reads it: under
// GRPC_XDS_SOTW its RUNTIME_* settings mean nothing (Envoy Gateway sets
// them anyway, with no folder there).
func (c *config) runtimeFolder() string {
	if c.XDS.Type == configTypeXDS {
		return ""
	}
	return c.Runtime.folder()
}

// descriptorsFolder is the folder of descriptor files, DESCRIPTORS_DIR's
// or the reference's config folder, and how it is read; "" for none.
func (c *config) descriptorsFolder() (string, descriptors.Options) {
	opts := descriptors.Options{MergeDomains: c.MergeDomains, MaxReservationTTL: c.MaxReservationTTL, GlobalScope: c.GlobalScope()}
	if dir := c.runtimeFolder(); dir != "" {
		opts.Tree, opts.TreeDotFiles = true, !c.Runtime.IgnoreDotFiles
		return dir, opts
	}
	return c.DescriptorsDir, opts
}

// openDescriptors loads DESCRIPTORS_DIR or the reference's config folder,
// if set, and reloads it on change.
func (a *app) openDescriptors(context.Context) error {
	cfg := a.cfg
	dir, opts := cfg.descriptorsFolder()
	if dir == "" {
		return nil
	}
	opts.OnLoad = a.onConfigLoad() // the reference's config_load_success and _error
	setting := "DESCRIPTORS_DIR"
	if opts.Tree {
		setting = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"
	}
	var r *descriptors.Reloader
	var err error
	if cfg.ForceStart {
		r, err = descriptors.NewReloaderWithoutInitialConfig(dir, cfg.ReloadInterval, opts, a.log, a.reg)
	} else {
		r, err = descriptors.NewReloader(dir, cfg.ReloadInterval, opts, a.log, a.reg)
	}
	if err != nil {
		if !cfg.ForceStart {
			err = fmt.Errorf("%w (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)", err)
		}
		return fmt.Errorf("%s: %w", setting, err)
	}
	a.current, a.descStatus = r.Current, domainStatus(r)
	a.goBG("descriptors", r.Run)
	if c := r.Current(); c != nil {
		a.log.Info("descriptor configuration loaded", "dir", dir, "domains", c.DomainCount())
	} else {
		a.log.Warn("starting without the descriptor configuration (FORCE_START_WITHOUT_INITIAL_CONFIG); it loads when it appears", "dir", dir)
	}
	return nil
}

// configDump is GET /rlconfig (of the debug port, and of PORT with
// RLCONFIG_ON_REST_PORT): the YAML configuration in use, as the reference
// service's debug endpoint (REST client rules are private to their clients
// and not part of it); under SHADOW_MODE every limit shows shadow_mode:
// true.
func (a *app) configDump() string {
	switch {
	case a.current == nil:
		return ""
	case a.cfg.ShadowMode:
		return a.current().DumpInShadowMode()
	}
	return a.current().Dump()
}

// domainStatus hands the reloader's view of a domain to the REST API in its
// own types.
func domainStatus(r *descriptors.Reloader) func(string) restapi.DescriptorStatus {
	return func(domain string) restapi.DescriptorStatus {
		s := r.DomainStatus(domain)
		return restapi.DescriptorStatus{YAML: len(s.Files) > 0, LoadedAt: s.LoadedAt, CheckedAt: s.CheckedAt, Valid: s.Valid}
	}
}
