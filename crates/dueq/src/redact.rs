//! Hiding the passwords in URLs before they are shown or logged: a webhook's URL, and the
//! Redis URL in an error or a log line (`redis://app:***@host`).

/// `url` with the password of its user-info, and the value of every query parameter whose
/// name contains `password` (`sentinel_password`) or is `pass` (`redis+unix://...?pass=`),
/// replaced by `***`; anything else is left
/// as it is. A URL that does not parse (a cluster's seed list `redis+cluster://h1:1,h2:2`)
/// has all of its user-info hidden instead (`scheme://***@host...`).
pub fn redact_url(url: &str) -> String {
    let shown = match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => match u.set_password(Some("***")) {
            Ok(()) => u.into(),
            Err(()) => return "<url with a password>".to_owned(),
        },
        Ok(_) => url.to_owned(),
        Err(_) => match url.split_once("://") {
            Some((scheme, rest)) => {
                let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                match rest[..end].rfind('@') {
                    Some(at) => format!("{scheme}://***{}", &rest[at..]),
                    None => url.to_owned(),
                }
            }
            None => url.to_owned(),
        },
    };
    redact_query(&shown)
}

/// `url` with the value of each query parameter named `...password...` or `pass` (a
/// `redis+unix` URL's password) as `***`.
fn redact_query(url: &str) -> String {
    let Some((head, rest)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = match rest.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (rest, None),
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((name, _))
                if name.to_ascii_lowercase().contains("password")
                    || name.eq_ignore_ascii_case("pass") =>
            {
                format!("{name}=***")
            }
            _ => p.to_owned(),
        })
        .collect();
    let mut out = format!("{head}?{}", params.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_in_urls_are_redacted() {
        for (url, shown) in [
            (
                "http://alice:S3cretPass@host/x?token=t",
                "http://alice:***@host/x?token=t",
            ),
            ("https://:pw@host:8443/", "https://:***@host:8443/"),
            ("https://alice@host/", "https://alice@host/"),
            ("https://host/a?b=c", "https://host/a?b=c"),
            ("not a url://a:b@c/d", "not a url://***@c/d"),
            (
                "redis://app:pw@127.0.0.1:6379/2",
                "redis://app:***@127.0.0.1:6379/2",
            ),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            (
                "redis+sentinel://s1:26379,s2:26379/main?sentinel_password=pw&x=1",
                "redis+sentinel://s1:26379,s2:26379/main?sentinel_password=***&x=1",
            ),
            (
                "rediss+sentinel://u:pw@s1:26379/main?Sentinel_Password=pw#f",
                "rediss+sentinel://u:***@s1:26379/main?Sentinel_Password=***#f",
            ),
            (
                "redis+cluster://u:pw@h1:1,h2:2",
                "redis+cluster://***@h1:1,h2:2",
            ),
        ] {
            assert_eq!(super::redact_url(url), shown, "{url}");
        }
    }
}
