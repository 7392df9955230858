package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/petrel-sfu/petrel/cluster"
)

func init() {
	register("cluster", "cluster status, drain and undrain (Redis-backed clusters)", clusterMain)
}

func clusterMain(args []string) int {
	if len(args) == 0 || (args[0] != "status" && args[0] != "drain" && args[0] != "undrain") {
		fmt.Fprintln(os.Stderr, "usage: petrel cluster status [--redis host:port]\n       petrel cluster drain <node> [--redis host:port] [--wait 60s]\n       petrel cluster undrain <node> [--redis host:port]")
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("cluster "+sub, flag.ContinueOnError)
	addr := fs.String("redis", envOr("PETREL_REDIS", "127.0.0.1:6379"), "Redis address of the cluster state")
	password := fs.String("redis-password", os.Getenv("PETREL_REDIS_PASSWORD"), "Redis password")
	useTLS := fs.Bool("redis-tls", false, "connect to Redis over TLS")
	tlsCA := fs.String("redis-tls-ca", os.Getenv("PETREL_REDIS_TLS_CA"), "PEM file of the CA that signed Redis's certificate (default: the system's)")
	wait := fs.Duration("wait", time.Minute, "drain: how long to wait for the node to empty (0: do not wait)")
	rest := args[1:]
	var node string
	if sub == "drain" || sub == "undrain" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			fmt.Fprintf(os.Stderr, "petrel cluster %s: which node? (petrel cluster status lists them)\n", sub)
			return 2
		}
		node, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	rdb, err := cluster.Dial(ctx, cluster.RedisOptions{Addr: *addr, Password: *password, TLS: *useTLS || *tlsCA != "", CAFile: *tlsCA})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel cluster:", err)
		return 1
	}
	defer rdb.Close()
	reg := cluster.NewRegistry(rdb, 0)
	if sub == "status" {
		return clusterStatus(reg)
	}
	if sub == "undrain" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Undrain(ctx, node); err != nil {
			fmt.Fprintln(os.Stderr, "petrel cluster undrain:", err)
			return 1
		}
		fmt.Printf("node %s takes new participants again (from its next heartbeat)\n", node)
		return 0
	}
	return clusterDrain(reg, node, *wait)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func clusterStatus(reg *cluster.Registry) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	live, lost, err := reg.Nodes(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel cluster status:", err)
		return 1
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tURL\tSTATE\tCPU\tPKT/S\tOUT MBIT/S\tPARTICIPANTS\tTRACKS\tROOMS\tLINKS\tHEARTBEAT")
	for _, n := range live {
		state := "up"
		if n.Draining {
			state = "draining"
		}
		age := time.Since(time.UnixMilli(n.Updated)).Round(time.Millisecond)
		fmt.Fprintf(w, "%s\t%s\t%s\t%.0f%%\t%.0f\t%.1f\t%d\t%d\t%d\t%d\t%s ago\n", n.ID, n.URL, state, n.Load.CPU*100,
			n.Load.PacketsPerSec, n.Load.EgressMbps, n.Load.Participants, n.Load.Tracks, n.Load.Rooms, n.Links, age)
	}
	for _, id := range lost {
		fmt.Fprintf(w, "%s\t\tlost\t\t\t\t\t\t\t\t\n", id)
	}
	w.Flush()
	// Rooms: where each room's participants are.
	rooms := map[string]map[string][]string{}
	for _, n := range live {
		for room, ms := range n.Rooms {
			if rooms[room] == nil {
				rooms[room] = map[string][]string{}
			}
			for _, m := range ms {
				id := m.Identity
				if m.Kind != "participant" {
					id += " (" + m.Kind + ")"
				}
				rooms[room][n.ID] = append(rooms[room][n.ID], id)
			}
		}
	}
	if len(rooms) == 0 {
		fmt.Println("\nno rooms")
		return 0
	}
	names := make([]string, 0, len(rooms))
	for r := range rooms {
		names = append(names, r)
	}
	sort.Strings(names)
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ROOM\tNODE\tPARTICIPANTS")
	for _, r := range names {
		nodes := make([]string, 0, len(rooms[r]))
		for id := range rooms[r] {
			nodes = append(nodes, id)
		}
		sort.Strings(nodes)
		for _, id := range nodes {
			fmt.Fprintf(w, "%s\t%s\t%s\n", r, id, strings.Join(rooms[r][id], ", "))
		}
	}
	w.Flush()
	return 0
}

func clusterDrain(reg *cluster.Registry, node string, wait time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := reg.Drain(ctx, node)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel cluster drain:", err)
		return 1
	}
	fmt.Printf("node %s is draining: its clients are asked to reconnect to other nodes\n", node)
	if wait <= 0 {
		return 0
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		live, _, err := reg.Nodes(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "petrel cluster drain:", err)
			return 1
		}
		found := false
		for _, n := range live {
			if n.ID == node {
				found = true
				if n.Draining && n.Load.Participants == 0 {
					fmt.Printf("node %s has no participants left: it can be stopped\n", node)
					return 0
				}
				fmt.Printf("  %d participants left\n", n.Load.Participants)
			}
		}
		if !found {
			fmt.Printf("node %s left the cluster\n", node)
			return 0
		}
		time.Sleep(2 * time.Second)
	}
	fmt.Fprintf(os.Stderr, "petrel cluster drain: node %s still has participants after %s (the node closes them after its drain_grace)\n", node, wait)
	return 1
}
