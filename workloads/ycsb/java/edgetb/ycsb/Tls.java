package edgetb.ycsb;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * The run's TLS context from the client's PEM files (testbed.cassandra.tls): ca.pem (the only
 * CA trusted), client.pem and client.key (PKCS#8, EC), in the directory $EDGETB_TLS. Host
 * names are not checked, as in the Python client: only the run's nodes hold a certificate of
 * its CA, and they are addressed by IP.
 */
final class Tls {
  private Tls() {}

  static SSLContext context(String dir) throws Exception {
    Path d = Paths.get(dir);
    CertificateFactory x509 = CertificateFactory.getInstance("X.509");
    Certificate ca;
    try (InputStream in = Files.newInputStream(d.resolve("ca.pem"))) {
      ca = x509.generateCertificate(in);
    }
    Certificate[] chain;
    try (InputStream in = Files.newInputStream(d.resolve("client.pem"))) {
      chain = x509.generateCertificates(in).toArray(new Certificate[0]);
    }
    String pem = Files.readString(d.resolve("client.key"));
    byte[] der =
        Base64.getDecoder().decode(pem.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", ""));
    PrivateKey key = KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(der));
    char[] password = "in-memory".toCharArray(); // the stores below never leave the process
    KeyStore keys = KeyStore.getInstance("PKCS12");
    keys.load(null, null);
    keys.setKeyEntry("client", key, password, chain);
    KeyManagerFactory km = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
    km.init(keys, password);
    KeyStore trusted = KeyStore.getInstance("PKCS12");
    trusted.load(null, null);
    trusted.setCertificateEntry("ca", ca);
    TrustManagerFactory tm = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    tm.init(trusted);
    SSLContext context = SSLContext.getInstance("TLS");
    context.init(km.getKeyManagers(), tm.getTrustManagers(), null);
    return context;
  }
}
