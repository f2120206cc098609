import Foundation

// MARK: - Making providers

extension StorageConnector {
    /// Makes a provider for the connector's location: one per task that talks to storage.
    ///
    /// Each call returns a new instance (for S3, with its own curl handle), so parallel upload
    /// jobs never share one. S3 settings (endpoint, region, credentials) are read from the
    /// process environment now.
    ///
    /// - Parameter create: make a `file://` directory that does not exist yet (`coven init`).
    ///   Without it, a missing directory is an error, so an unmounted disk never looks like an
    ///   empty store. S3 buckets are never created here.
    /// - Returns: a ``FileStorage`` or an ``S3Storage``.
    /// - Throws: ``CovenError`` `.storage`: failure `.network` when a `file://` directory is not
    ///   there; failure `.denied` when S3 credentials are missing; `.usage` for a bad endpoint.
    public func connect(create: Bool = false) throws -> any StorageProvider {
        switch location {
        case .file(let directory):
            return try FileStorage(directory: directory, create: create)
        case .s3:
            return try S3Storage(location: location, options: options, environment: environment ?? ProcessInfo.processInfo.environment)
        }
    }
}
