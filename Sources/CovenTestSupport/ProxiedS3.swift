import CovenKit
import Foundation

/// A moto server on loopback behind a fault proxy, with a fresh bucket, for tests that run the
/// binary against S3 and inject faults. The server's credentials are set in this process's
/// environment (for StoredFiles) until ``stop()``, which restores what was there, so no later
/// test reuses a server that is gone.
public final class ProxiedS3 {
    public let server: S3TestServer
    public let proxy: FaultProxy
    public let bucket: String
    private let saved: [(String, String?)]

    /// Starts the server and the proxy, and makes a bucket named `bucketPrefix` and a random
    /// suffix.
    public init(bucketPrefix: String) throws {
        server = try S3TestServer.start(.moto)
        do {
            proxy = try FaultProxy(upstream: server.endpoint)
        } catch {
            server.stop()
            throw error
        }
        saved = server.environment.keys.map { ($0, ProcessInfo.processInfo.environment[$0]) }
        for (name, value) in server.environment { setenv(name, value, 1) }
        bucket = bucketPrefix + "-" + UUID().uuidString.lowercased().prefix(8)
        do {
            try server.makeBucket(bucket)
        } catch {
            stop()
            throw error
        }
    }

    /// A storage location in the bucket, reached through the proxy.
    public func location(prefix: String = "store") -> StorageLocation {
        .s3(bucket: bucket, prefix: prefix, endpoint: proxy.endpoint, region: server.region, pathStyle: true)
    }

    /// Stops the proxy and the server and restores the environment.
    public func stop() {
        for (name, value) in saved {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
        proxy.stop()
        server.stop()
    }
}
