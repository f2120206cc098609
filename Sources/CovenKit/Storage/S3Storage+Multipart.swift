import Foundation

extension S3Storage {
    // MARK: - Multipart

    public func createMultipart(_ key: String, totalSize: Int64, partSize: Int64) throws -> String {
        let operation = "start an upload of '\(key)'"
        let response = try client.send(operation: operation, timeout: options.controlTimeout, body: UnsafeRawBufferPointer(start: nil, count: 0)) { _ in
            try request("POST", key: key, query: [("uploads", "")])
        }
        guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
        guard let uploadID = S3XML(response.body).text("UploadId"), !uploadID.isEmpty else {
            throw CovenError.storage(
                "storage gave no upload id for '\(key)'", failure: .provider, cause: "no UploadId in the answer",
                status: response.status)
        }
        return uploadID
    }

    public func uploadPart(_ key: String, uploadID: String, number: Int, offset: Int64, data: UnsafeRawBufferPointer) throws -> UploadedPart {
        let operation = "send part \(number) of '\(key)'"
        let query = [("partNumber", String(number)), ("uploadId", uploadID)]
        let response = try client.send(operation: operation, timeout: options.bytesTimeout, body: data) { _ in
            try request("PUT", key: key, query: query, payloadHash: SigV4Signer.unsignedPayload)
        }
        if response.status == 404, isKeyNotFound(response) { throw missingUpload(key, uploadID, response) }
        guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
        guard let etag = response.header("etag"), !etag.isEmpty else {
            throw CovenError.storage(
                "storage gave no ETag for part \(number) of '\(key)'", failure: .provider, cause: "no ETag header",
                status: response.status)
        }
        return UploadedPart(number: number, etag: etag, size: Int64(data.count))
    }

    private func missingUpload(_ key: String, _ uploadID: String, _ response: HTTPResponse) -> CovenError {
        var error = missing(key, response)
        error.message = "the upload of '\(key)' no longer exists"
        error.details["upload"] = uploadID
        return error
    }

    public func listParts(_ key: String, uploadID: String) throws -> [UploadedPart] {
        let operation = "list the parts of '\(key)'"
        var parts: [UploadedPart] = []
        var marker: String?
        repeat {
            var query = [("uploadId", uploadID), ("max-parts", String(partsPageSize))]
            if let marker { query.append(("part-number-marker", marker)) }
            let response = try control("GET", key: key, query: query, operation: operation)
            if response.status == 404, isKeyNotFound(response) { throw missingUpload(key, uploadID, response) }
            guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
            let xml = S3XML(response.body)
            for block in xml.blocks("Part") {
                guard let number = block.text("PartNumber").flatMap({ Int($0) }), let etag = block.text("ETag"),
                      let size = block.text("Size").flatMap({ Int64($0) })
                else { continue }
                parts.append(UploadedPart(number: number, etag: etag, size: size))
            }
            marker = try Self.nextPage(xml, marker: "NextPartNumberMarker", of: "part list", status: response.status)
        } while marker != nil
        parts.sort { $0.number < $1.number }
        return parts
    }

    public func completeMultipart(_ key: String, uploadID: String, parts: [UploadedPart]) throws {
        let operation = "complete the upload of '\(key)'"
        let sorted = parts.sorted { $0.number < $1.number }
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in sorted {
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(S3XML.escape(part.etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let body = Array(xml.utf8)
        let payloadHash = SHA256.digest(body).hex
        // S3 may answer 200 and then an <Error> in the body while it assembles a large object;
        // such an answer is retried like a 5xx.
        var attempts = 0
        while true {
            let response = try body.withUnsafeBytes { bytes in
                try client.send(operation: operation, timeout: options.bytesTimeout, body: bytes) { _ in
                    try request("POST", key: key, query: [("uploadId", uploadID)], payloadHash: payloadHash, contentType: "application/xml")
                }
            }
            if response.status == 200 {
                let answer = S3XML(response.body)
                if answer.rootName != "Error" { return }
                var failed = response
                failed.status = 500
                attempts += 1
                if attempts <= options.requestRetries { continue }
                throw HTTPClient.statusError(failed, operation: operation)
            }
            if response.status == 404, isKeyNotFound(response) {
                // An earlier attempt may have completed it and lost the answer.
                let size = sorted.reduce(Int64(0)) { $0 + $1.size }
                if let info = try head(key), info.size == size { return }
                throw missingUpload(key, uploadID, response)
            }
            throw HTTPClient.statusError(response, operation: operation)
        }
    }

    public func abortMultipart(_ key: String, uploadID: String) throws {
        let operation = "abandon the upload of '\(key)'"
        let response = try control("DELETE", key: key, query: [("uploadId", uploadID)], operation: operation)
        guard response.isSuccess || isKeyNotFound(response) else {
            throw HTTPClient.statusError(response, operation: operation)
        }
    }

    public func uploadsInProgress(_ key: String) throws -> [String] {
        let operation = "list the uploads of '\(key)'"
        let name = objectKey(key)
        var ids: [String] = []
        var markers: (key: String, upload: String)?
        repeat {
            var query: [(String, String)] = [("uploads", ""), ("prefix", name)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.upload)] }
            let response = try control("GET", key: nil, query: query, operation: operation)
            guard response.status == 200 else { throw HTTPClient.statusError(response, operation: operation) }
            let xml = S3XML(response.body)
            // The prefix also matches longer keys: only this key's uploads count.
            for block in xml.blocks("Upload") where block.text("Key") == name {
                if let id = block.text("UploadId"), !id.isEmpty { ids.append(id) }
            }
            markers = nil
            if xml.text("IsTruncated") == "true", let next = xml.text("NextKeyMarker"), let upload = xml.text("NextUploadIdMarker"),
               !(next.isEmpty && upload.isEmpty) {
                markers = (next, upload)
            }
        } while markers != nil
        return ids
    }
}
