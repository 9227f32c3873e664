// Command burst starts an example server on a free loopback port, fires a
// burst of requests at it and prints the status and rate-limit headers of
// each response, so that Normal, Warning and Throttled can be seen.
//
//	burst [-n 12] [-path /hello] -- ./server-binary [args...]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

func main() {
	n := flag.Int("n", 12, "requests to send")
	path := flag.String("path", "/hello", "path to request")
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: burst [-n N] [-path P] -- server-command [args...]")
	}
	addr := freeAddr()
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Env = append(os.Environ(), "ADDR="+addr)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	base := "http://" + addr
	if err := waitUp(base + "/healthz"); err != nil {
		log.Print(err)
		return
	}
	fmt.Printf("\n%d requests to GET %s, one client:\n\n", *n, *path)
	for i := 1; i <= *n; i++ {
		resp, err := http.Get(base + *path)
		if err != nil {
			log.Print(err)
			return
		}
		resp.Body.Close()
		h := resp.Header
		line := fmt.Sprintf("%2d  %d %-17s  state=%-9s  RateLimit: %s", i, resp.StatusCode, http.StatusText(resp.StatusCode), h.Get("X-RateLimit-State"), h.Get("RateLimit"))
		if ra := h.Get("Retry-After"); ra != "" {
			line += "  Retry-After: " + ra
		}
		fmt.Println(line)
		if i == 1 {
			fmt.Printf("    RateLimit-Policy: %s   X-RateLimit-Limit: %s\n", h.Get("RateLimit-Policy"), h.Get("X-RateLimit-Limit"))
		}
	}
	fmt.Println(strings.TrimSpace(`
Requests 1-8 are normal; 9 and 10 pass with X-RateLimit-State: warning
(usage above 80%); from 11 on the client is throttled: 429 with Retry-After.`))
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitUp(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("burst: the server did not answer %s", url)
}
