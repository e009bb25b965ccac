// containerd-stargz-grpc: stargz-snapshotter's lazy-pulling snapshotter as a containerd proxy plugin, built on the
// library Debian packages (golang-github-containerd-stargz-snapshotter-dev), which ships no daemon of its own.
//
// Why trainimg has one: its tests and bench pull eStargz images lazily, as a node running containerd with
// stargz-snapshotter does (shared/reference/nodes.md, "Lazy pulling"). Built by build.sh beside this file.
//
//	containerd-stargz-grpc --address SOCKET --root DIR [--config FILE] [--log-level debug]
//
// Registry credentials come from the Docker config file (DOCKER_CONFIG), never from the command line. SIGTERM or
// SIGINT stops the server and closes the snapshotter, which unmounts every FUSE layer it mounted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/contrib/snapshotservice"
	"github.com/containerd/containerd/log"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/dockerconfig"
	"github.com/pelletier/go-toml"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

func main() {
	address := flag.String("address", "", "unix socket to serve containerd's snapshots API on")
	root := flag.String("root", "", "folder of the snapshotter's state, caches and FUSE mounts")
	configPath := flag.String("config", "", "TOML file of stargz-snapshotter's fs settings (optional)")
	logLevel := flag.String("log-level", "info", "logrus level; debug logs remote-snapshot-prepared per layer")
	flag.Parse()
	if err := serve(*address, *root, *configPath, *logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "containerd-stargz-grpc: %v\n", err)
		os.Exit(1)
	}
}

func serve(address, root, configPath, logLevel string) error {
	if address == "" || root == "" {
		return fmt.Errorf("--address and --root are required")
	}
	level, err := logrus.ParseLevel(logLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: %w", logLevel, err)
	}
	logrus.SetLevel(level)
	logrus.SetFormatter(&logrus.JSONFormatter{TimestampFormat: log.RFC3339NanoFixed})
	config, err := readConfig(configPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(log.WithLogger(context.Background(), log.L))
	defer cancel()
	rs, err := service.NewStargzSnapshotterService(ctx, root, &config,
		service.WithCredsFuncs(dockerconfig.NewDockerconfigKeychain(ctx)))
	if err != nil {
		return fmt.Errorf("snapshotter: %w", err)
	}
	grpcServer := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(grpcServer, snapshotservice.FromSnapshotter(rs))
	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return err
	}
	if err := os.RemoveAll(address); err != nil {
		return err
	}
	listener, err := net.Listen("unix", address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", address, err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- grpcServer.Serve(listener) }()
	log.G(ctx).WithField("address", address).Info("serving stargz snapshotter")
	select {
	case sig := <-stop:
		log.G(ctx).WithField("signal", sig.String()).Info("stopping")
		grpcServer.GracefulStop()
	case err = <-served:
	}
	if cerr := rs.Close(); cerr != nil { // unmounts the FUSE layers
		log.G(ctx).WithError(cerr).Warn("closing the snapshotter")
		if err == nil {
			err = cerr
		}
	}
	return err
}

// readConfig reads stargz-snapshotter's config (the upstream daemon's config.toml keys); none: the defaults.
func readConfig(path string) (service.Config, error) {
	var config service.Config
	if path == "" {
		return config, nil
	}
	tree, err := toml.LoadFile(path)
	if err != nil {
		return config, fmt.Errorf("config %s: %w", path, err)
	}
	if err := tree.Unmarshal(&config); err != nil {
		return config, fmt.Errorf("config %s: %w", path, err)
	}
	return config, nil
}
