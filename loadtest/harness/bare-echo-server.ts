/**
 * The ceiling: a bare uWebSockets.js server — no batching, no workers, no admission — that
 * parses each JSON request and answers at once with a response of the same shape the real
 * server sends: `{"id","model","version":"1","result":<input>,"latency_ms":0}`.
 *
 *   node dist/loadtest/harness/bare-echo-server.js [port] [cert.pem key.pem]
 *                                      (port 0 / absent = any free port; cert and key: TLS, uWS SSLApp)
 *
 * Reports `{type:'listening', port}` over IPC when forked, and prints `LISTENING <port>` on
 * stdout. `GET /health` answers 200. SIGTERM/SIGINT close the listen socket and exit.
 * Refuses to run on uWS's pure-JS fallback: a ceiling measured on it would be meaningless.
 */
import * as uWS from 'uWebSockets.js';
import { echoAnswer } from './echo-answer';

export function uwsIsNative(): boolean {
  return String(uWS.App).includes('[native code]');
}

const decoder = new TextDecoder();

/** Listens in this process (the forked child `startBareEcho` in server-process.ts runs); returns the stop. */
export function serveBareEcho(
  port: number,
  onListen: (port: number) => void,
  tls?: { cert: string; key: string },
): () => void {
  let listenSocket: uWS.us_listen_socket | undefined;
  let connections = 0;
  let served = 0;
  const app = (tls ? uWS.SSLApp({ cert_file_name: tls.cert, key_file_name: tls.key }) : uWS.App())
    .ws('/ws', {
      compression: uWS.DISABLED,
      maxPayloadLength: 16 * 1024 * 1024,
      idleTimeout: 120,
      maxBackpressure: 64 * 1024 * 1024,
      open: () => {
        connections++;
      },
      close: () => {
        connections--;
      },
      message: (ws, message, isBinary) => {
        if (isBinary) {
          ws.send(
            JSON.stringify({
              id: null,
              type: 'error',
              code: 'bad_request',
              message: 'binary frames not supported',
            }),
          );
          return;
        }
        served++;
        // decode copies: the ArrayBuffer is only valid during this call
        ws.send(echoAnswer(decoder.decode(message)), false);
      },
    })
    .get('/health', (res) => {
      res.cork(() => {
        res
          .writeStatus('200 OK')
          .writeHeader('content-type', 'application/json')
          .end(JSON.stringify({ status: 'ok', server: 'bare-echo', connections, served }));
      });
    })
    .any('/*', (res) => {
      res.cork(() => {
        res.writeStatus('404 Not Found').end('not found');
      });
    });
  app.listen('127.0.0.1', port, (sock) => {
    if (!sock) throw new Error(`bare-echo: cannot listen on 127.0.0.1:${port}`);
    listenSocket = sock;
    onListen(uWS.us_socket_local_port(sock));
  });
  return () => {
    if (listenSocket) uWS.us_listen_socket_close(listenSocket);
    listenSocket = undefined;
  };
}

if (require.main === module) {
  if (!uwsIsNative()) {
    process.stderr.write(
      'bare-echo: uWebSockets.js native binary did not load (pure-JS fallback); refusing to run\n',
    );
    process.exit(1);
  }
  const arg = process.argv[2] ?? process.env['PORT'] ?? '0';
  const port = Number(arg);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`bare-echo: invalid port ${arg}\n`);
    process.exit(1);
  }
  const [cert, key] = [process.argv[3], process.argv[4]];
  const stop = serveBareEcho(
    port,
    (p) => {
      process.stdout.write(`LISTENING ${p}\n`);
      process.send?.({ type: 'listening', port: p });
    },
    cert && key ? { cert, key } : undefined,
  );
  const shutdown = (): void => {
    stop();
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  process.on('disconnect', shutdown);
}
