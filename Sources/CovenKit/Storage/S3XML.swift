import Foundation

// MARK: - A small scanner for S3's XML answers

/// Reads the few flat XML documents S3 answers with (errors, listings, multipart results).
///
/// S3's responses are shallow and regular: a root element holding simple `<Name>text</Name>`
/// elements and repeated blocks (`<Contents>`, `<Part>`). This scanner finds elements by name
/// and decodes the five predefined entities and numeric character references; it does not
/// validate the document. It works on the UTF-8 bytes, so keys are never reinterpreted.
struct S3XML {
    /// The document's bytes.
    let bytes: [UInt8]

    /// Wraps a response body.
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Wraps a slice of a document (one block).
    init<S: Sequence>(slice: S) where S.Element == UInt8 { self.bytes = Array(slice) }

    /// The name of the root element (`Error`, `ListBucketResult`, …), when there is one.
    var rootName: String? {
        var index = 0
        while index < bytes.count {
            guard let open = bytes[index...].firstIndex(of: UInt8(ascii: "<")) else { return nil }
            let next = open + 1
            guard next < bytes.count else { return nil }
            let first = bytes[next]
            if first == UInt8(ascii: "?") || first == UInt8(ascii: "!") {
                index = next
                continue
            }
            var end = next
            while end < bytes.count, !Self.isNameEnd(bytes[end]) { end += 1 }
            return String(decoding: bytes[next..<end], as: UTF8.self)
        }
        return nil
    }

    /// The text of the first element called `name` (entities decoded), or nil.
    func text(_ name: String) -> String? {
        blocks(name).first.map { Self.decodeEntities($0.bytes) }
    }

    /// The contents of every element called `name`, in document order (not nested in each other).
    func blocks(_ name: String) -> [S3XML] {
        let open = Array("<\(name)".utf8)
        let close = Array("</\(name)>".utf8)
        var found: [S3XML] = []
        var index = 0
        while let start = Self.find(open, in: bytes, from: index) {
            let afterName = start + open.count
            guard afterName < bytes.count else { break }
            let terminator = bytes[afterName]
            // `<Key>` must not match `<KeyCount>`.
            guard terminator == UInt8(ascii: ">") || terminator == UInt8(ascii: " ") || terminator == UInt8(ascii: "/") else {
                index = afterName
                continue
            }
            guard let tagEnd = bytes[afterName...].firstIndex(of: UInt8(ascii: ">")) else { break }
            if bytes[tagEnd - 1] == UInt8(ascii: "/") {
                found.append(S3XML([]))  // <Prefix/>
                index = tagEnd + 1
                continue
            }
            guard let end = Self.find(close, in: bytes, from: tagEnd + 1) else { break }
            found.append(S3XML(slice: bytes[(tagEnd + 1)..<end]))
            index = end + close.count
        }
        return found
    }

    // MARK: - Helpers

    private static func isNameEnd(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ">") || byte == UInt8(ascii: " ") || byte == UInt8(ascii: "/")
            || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\t")
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard let first = needle.first, needle.count <= haystack.count else { return nil }
        var index = start
        let last = haystack.count - needle.count
        while index <= last {
            guard let candidate = haystack[index...last].firstIndex(of: first) else { return nil }
            var matched = true
            for offset in 1..<needle.count where haystack[candidate + offset] != needle[offset] {
                matched = false
                break
            }
            if matched { return candidate }
            index = candidate + 1
        }
        return nil
    }

    /// Decodes `&amp; &lt; &gt; &quot; &apos; &#NN; &#xHH;` and CDATA sections.
    static func decodeEntities(_ bytes: [UInt8]) -> String {
        guard bytes.contains(UInt8(ascii: "&")) || bytes.contains(UInt8(ascii: "<")) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        var text = String(decoding: bytes, as: UTF8.self)
        if text.contains("<![CDATA[") {
            text = text.replacingOccurrences(of: "<![CDATA[", with: "").replacingOccurrences(of: "]]>", with: "")
        }
        var out = ""
        var rest = Substring(text)
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semi = rest[amp...].firstIndex(of: ";") else {
                out += rest[amp...]
                return out
            }
            let entity = rest[rest.index(after: amp)..<semi]
            switch entity {
            case "amp": out += "&"
            case "lt": out += "<"
            case "gt": out += ">"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                var scalar: Unicode.Scalar?
                if entity.hasPrefix("#x") || entity.hasPrefix("#X") {
                    scalar = UInt32(entity.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init)
                } else if entity.hasPrefix("#") {
                    scalar = UInt32(entity.dropFirst(1)).flatMap(Unicode.Scalar.init)
                }
                if let scalar {
                    out.unicodeScalars.append(scalar)
                } else {
                    out += rest[amp...semi]
                }
            }
            rest = rest[rest.index(after: semi)...]
        }
        out += rest
        return out
    }

    /// Escapes text for an XML element (`&`, `<`, `>`, quotes).
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(character)
            }
        }
        return out
    }
}
