import CovenKit
import Foundation

// MARK: - A fault-injecting proxy

/// `scripts/faultproxy.py` in front of a loopback S3 server: forwards requests unchanged (Host
/// included, so SigV4 still verifies) and injects the faults written with ``inject(_:)``.
///
/// The proxy exits when ``stop()`` is called, when this test process dies, or after 10 minutes.
public final class FaultProxy {
    /// `http://127.0.0.1:PORT`: use it as the client's endpoint.
    public let endpoint: String
    private let process: Spawn.Child
    private let workDirectory: String
    private var stopped = false

    /// Starts a proxy to `upstream` (`http://host:port`).
    ///
    /// - Throws: ``CovenError`` `.internal` when python3 or the script cannot start.
    public init(upstream: String) throws {
        let script = TestPaths.repositoryRoot() + "/scripts/faultproxy.py"
        let work = try TestPaths.temporaryDirectory("faultproxy")
        let portFile = work + "/port"
        let process: Spawn.Child
        do {
            process = try Spawn.start(
                "/usr/bin/env",
                [
                    "python3", script, "--upstream", upstream, "--port", "0", "--port-file", portFile,
                    "--control", work + "/control.json", "--stats", work + "/stats.json", "--log", work + "/requests.log",
                    "--parent-pid", String(ProcessInfo.processInfo.processIdentifier), "--timeout", "600",
                ],
                stderr: work + "/proxy.log")
        } catch {
            throw CovenError(.internal, "cannot start the fault proxy", cause: String(describing: error))
        }
        let deadline = Date().addingTimeInterval(15)
        var port: Int?
        while Date() < deadline {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8),
               let value = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                port = value
                break
            }
            guard Spawn.isRunning(process) else { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        guard let port else {
            Spawn.stop(process, grace: 1)
            let log = (try? String(contentsOfFile: work + "/proxy.log", encoding: .utf8)) ?? ""
            throw CovenError(.internal, "the fault proxy did not start", cause: log)
        }
        self.endpoint = "http://127.0.0.1:\(port)"
        self.process = process
        self.workDirectory = work
    }

    deinit { stop() }

    /// Sets the faults: one rule or `{"rules": [...]}` (see scripts/faultproxy.py), replacing
    /// the previous ones and their counters. The modes: `status` (an error answer), `reset` and
    /// `stall` (a body cut short of its `Content-Length`, or none), `ignore_range` (200 with the
    /// whole object for a range), `short_range` (a 206 cut to its first `after_bytes` bytes with
    /// `Content-Range` and `Content-Length` rewritten to match: short but self-consistent).
    ///
    /// - Throws: when the control file cannot be written.
    public func inject(_ json: String) throws {
        let path = workDirectory + "/control.json"
        let temporary = path + ".tmp"
        try Data(json.utf8).write(to: URL(fileURLWithPath: temporary))
        guard rename(temporary, path) == 0 else {
            throw CovenError(.internal, "cannot write the fault proxy's control file", cause: String(cString: strerror(errno)))
        }
    }

    /// Removes every fault.
    public func clear() throws { try inject("{}") }

    /// The proxy's counters: `requests`, `forwarded`, `injected`, `status`, `reset`, `stall`,
    /// `ignore_range`, `short_range`, `body_bytes`.
    public func stats() -> [String: Int] {
        guard let data = FileManager.default.contents(atPath: workDirectory + "/stats.json"),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Int]
        else { return [:] }
        return object
    }

    /// Every request the proxy received so far, one per line: `METHOD PATH?QUERY BODY-BYTES
    /// ACTION` (ACTION is `forwarded` or the injected fault's mode).
    public func requests() -> [String] {
        guard let text = try? String(contentsOfFile: workDirectory + "/requests.log", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").map(String.init)
    }

    /// Stops the proxy (the process this object started) and removes its files.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        Spawn.stop(process, grace: 5)
        try? FileManager.default.removeItem(atPath: workDirectory)
    }
}
