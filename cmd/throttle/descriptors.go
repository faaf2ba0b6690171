package main

import (
	"context"
	"fmt"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/restapi"
)

// openDescriptors loads DESCRIPTORS_DIR, if set, and reloads it on change.
func (a *app) openDescriptors(context.Context) error {
	cfg := a.cfg
	if cfg.DescriptorsDir == "" {
		return nil
	}
	opts := descriptors.Options{MergeDomains: cfg.MergeDomains, OnLoad: a.onConfigLoad()}
	var r *descriptors.Reloader
	var err error
	if cfg.ForceStart {
		r, err = descriptors.NewReloaderWithoutInitialConfig(cfg.DescriptorsDir, cfg.ReloadInterval, opts, a.log, a.reg)
	} else {
		r, err = descriptors.NewReloader(cfg.DescriptorsDir, cfg.ReloadInterval, opts, a.log, a.reg)
	}
	if err != nil {
		if !cfg.ForceStart {
			err = fmt.Errorf("%w (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)", err)
		}
		return fmt.Errorf("DESCRIPTORS_DIR: %w", err)
	}
	a.current, a.descStatus = r.Current, domainStatus(r)
	a.goBG("descriptors", r.Run)
	if c := r.Current(); c != nil {
		a.log.Info("descriptor configuration loaded", "dir", cfg.DescriptorsDir, "domains", c.DomainCount())
	} else {
		a.log.Warn("starting without the descriptor configuration (FORCE_START_WITHOUT_INITIAL_CONFIG); it loads when it appears", "dir", cfg.DescriptorsDir)
	}
	return nil
}

// domainStatus hands the reloader's view of a domain to the REST API in its
// own types.
func domainStatus(r *descriptors.Reloader) func(string) restapi.DescriptorStatus {
	return func(domain string) restapi.DescriptorStatus {
		s := r.DomainStatus(domain)
		files := make([]restapi.DescriptorFile, len(s.Files))
		for i, f := range s.Files {
			files[i] = restapi.DescriptorFile{Name: f.Name, Content: string(f.Data)}
		}
		return restapi.DescriptorStatus{
			Files: files, LoadedAt: s.LoadedAt, CheckedAt: s.CheckedAt, Valid: s.Valid, Problems: s.Problems,
		}
	}
}
