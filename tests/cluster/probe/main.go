// probe: the cluster tests' network check, in an image of its own (FROM scratch, this one static
// binary): `probe serve ADDR` answers every request with its host name; `probe get URL` resolves
// the URL's host through the pod's resolver (cluster DNS), fetches it, and prints one JSON line:
// the addresses the name resolved to and the answer. Standard library only.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

func serve(addr string) error {
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", host)
	})
	return http.ListenAndServe(addr, nil)
}

func get(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	var addrs []string
	var body []byte
	var lastErr error
	// the Service's endpoints may still be settling: try for a while, report the last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if addrs, lastErr = net.LookupHost(u.Hostname()); lastErr != nil {
			continue
		}
		client := http.Client{Timeout: 5 * time.Second}
		resp, err := client.Get(raw)
		if err != nil {
			lastErr = err
			continue
		}
		body, lastErr = io.ReadAll(resp.Body)
		resp.Body.Close()
		if lastErr == nil && resp.StatusCode == http.StatusOK {
			break
		}
		lastErr = fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	if lastErr != nil {
		return lastErr
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"host": u.Hostname(), "addresses": addrs, "body": string(body),
	})
}

func main() {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "serve":
		err = serve(os.Args[2])
	case len(os.Args) == 3 && os.Args[1] == "get":
		err = get(os.Args[2])
	default:
		err = fmt.Errorf("usage: probe serve ADDR | probe get URL")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}
